//! The Kubernetes manifests of `deploy/kubernetes` against the product: every YAML document parses, is
//! a known kind/apiVersion and reads as the Kubernetes API's type of that kind with no unknown field; the
//! kustomization lists every manifest but the example pod, and `kubectl kustomize` builds it; the
//! DaemonSet's container arguments (with the ConfigMap's values and the downward API substituted as kubelet
//! does) are accepted by the real `tessera` — the plugin's are checked
//! by `tessera k8s device-plugin ... --check-config`, which prints what it would run with; the daemon and the
//! plugin agree on the region and socket; every host path the plugin hands to kubelet or the daemon uses is
//! a hostPath mounted at the same path; every ConfigMap key is consumed; the RBAC grants pods
//! get/list/watch to the DaemonSet's ServiceAccount; the example pod asks for `tessera.io/vgpu: 2` with the
//! memory and share annotations; the Dockerfile installs where the DaemonSet copies from.
//!
//! Needs the release build of the workspace (`cargo build --release --workspace`): `tessera` finds its
//! libraries beside itself in the build tree.

use crate::common::repo;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `deploy/kubernetes`.
fn manifests_dir() -> PathBuf {
    repo().join("deploy/kubernetes")
}

/// Every YAML document of every `*.yaml` file of `deploy/kubernetes`, with its file name.
fn documents() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(manifests_dir())
        .expect("deploy/kubernetes exists")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&file).expect("read a manifest");
        for doc in serde_norway::Deserializer::from_str(&text) {
            let value = Value::deserialize(doc).unwrap_or_else(|e| panic!("{name}: not valid YAML: {e}"));
            if !value.is_null() {
                docs.push((name.clone(), value));
            }
        }
    }
    docs
}

/// `doc` read as the Kubernetes API type `T` (types and required fields checked) and written back.
fn through<T: DeserializeOwned + serde::Serialize>(doc: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(doc.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(&typed).map_err(|e| e.to_string())
}

/// `doc` (a Kubernetes object of kind `kind`) through its API type ([`through`]).
fn typed(kind: &str, doc: &Value) -> Result<Value, String> {
    match kind {
        "Namespace" => through::<Namespace>(doc),
        "ServiceAccount" => through::<ServiceAccount>(doc),
        "ConfigMap" => through::<ConfigMap>(doc),
        "Pod" => through::<Pod>(doc),
        "ClusterRole" => through::<ClusterRole>(doc),
        "ClusterRoleBinding" => through::<ClusterRoleBinding>(doc),
        "DaemonSet" => through::<DaemonSet>(doc),
        other => Err(format!("no API type for kind {other}")),
    }
}

/// The fields of `original` that `typed` (its round trip through an API type) lost: fields the API does
/// not have, such as a misspelt one (the API types ignore unknown fields when reading).
fn lost_fields(original: &Value, typed: &Value, at: &str, lost: &mut Vec<String>) {
    match (original, typed) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                match b.get(key) {
                    Some(kept) => lost_fields(value, kept, &format!("{at}.{key}"), lost),
                    None => lost.push(format!("{at}.{key}")),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (value, kept)) in a.iter().zip(b).enumerate() {
                lost_fields(value, kept, &format!("{at}[{i}]"), lost);
            }
        }
        _ => {}
    }
}

/// The one document of kind `kind`.
fn one<'a>(docs: &'a [(String, Value)], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|(_, d)| d["kind"] == kind).map(|(_, d)| d).collect();
    assert_eq!(found.len(), 1, "one {kind} expected");
    found[0]
}

/// `value` as a string, failing with `what`.
fn text<'a>(value: &'a Value, what: &str) -> &'a str {
    value.as_str().unwrap_or_else(|| panic!("{what}: expected a string, found {value}"))
}

/// `value` as a list (an absent one is empty).
fn list(value: &Value) -> &[Value] {
    value.as_array().map(Vec::as_slice).unwrap_or(&[])
}

/// The DaemonSet's pod spec.
fn pod_spec(docs: &[(String, Value)]) -> &Value {
    &one(docs, "DaemonSet")["spec"]["template"]["spec"]
}

/// The container (or init container) named `name` of the DaemonSet.
fn container<'a>(docs: &'a [(String, Value)], name: &str) -> &'a Value {
    let spec = pod_spec(docs);
    list(&spec["containers"])
        .iter()
        .chain(list(&spec["initContainers"]))
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name} in the DaemonSet"))
}

/// A container's environment as kubelet makes it: plain values, ConfigMap keys (from `config`), and the
/// downward API's `spec.nodeName` (as `node-1`).
fn environment(c: &Value, config: &BTreeMap<String, String>, configmap: &str) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for var in list(&c["env"]) {
        let name = text(&var["name"], "env name").to_string();
        let value = if let Some(v) = var.get("value") {
            text(v, &name).to_string()
        } else if let Some(key) = var.pointer("/valueFrom/configMapKeyRef") {
            assert_eq!(text(&key["name"], &name), configmap, "{name} names another ConfigMap");
            let k = text(&key["key"], &name);
            config.get(k).unwrap_or_else(|| panic!("{name}: the ConfigMap has no key {k}")).clone()
        } else if let Some(field) = var.pointer("/valueFrom/fieldRef/fieldPath") {
            assert_eq!(text(field, &name), "spec.nodeName", "{name}");
            "node-1".to_string()
        } else {
            panic!("{name}: neither a value, a ConfigMap key nor the node name: {var}");
        };
        env.insert(name, value);
    }
    env
}

/// `args` with each `$(VAR)` replaced by `env`'s value, as kubelet does; an unknown variable fails.
fn expand(args: &[Value], env: &BTreeMap<String, String>) -> Vec<String> {
    args.iter()
        .map(|a| {
            let mut s = text(a, "an argument").to_string();
            while let Some(start) = s.find("$(") {
                let end = start + s[start..].find(')').expect("a closed $(VAR)");
                let var = &s[start + 2..end];
                let value = env.get(var).unwrap_or_else(|| panic!("$({var}) is not in the container's env"));
                s.replace_range(start..=end, value);
            }
            s
        })
        .collect()
}

/// The host path of each volume of the DaemonSet, by name.
fn host_paths(docs: &[(String, Value)]) -> BTreeMap<String, String> {
    list(&pod_spec(docs)["volumes"])
        .iter()
        .map(|v| {
            let name = text(&v["name"], "volume name").to_string();
            let path = text(&v["hostPath"]["path"], &format!("volume {name}: a hostPath")).to_string();
            (name, path)
        })
        .collect()
}

/// Whether `path` is inside a volume of container `c` that is the host path mounted at the same path.
fn mounted_as_on_host(c: &Value, volumes: &BTreeMap<String, String>, path: &str) -> bool {
    list(&c["volumeMounts"]).iter().any(|m| {
        let at = text(&m["mountPath"], "mountPath");
        volumes.get(text(&m["name"], "mount name")).is_some_and(|host| host == at) && Path::new(path).starts_with(at)
    })
}

/// The ConfigMap's data.
fn config_data(docs: &[(String, Value)]) -> BTreeMap<String, String> {
    let data = one(docs, "ConfigMap")["data"].as_object().expect("the ConfigMap has data");
    data.iter().map(|(k, v)| (k.clone(), text(v, k).to_string())).collect()
}

/// The built `tessera`, with no `TESSERA_` variable of the test's environment.
fn tessera() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tessera"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("TESSERA_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

#[test]
fn every_document_is_a_known_kind_and_the_kustomization_builds() {
    let docs = documents();
    let known: BTreeMap<&str, &str> = [
        ("Namespace", "v1"),
        ("ServiceAccount", "v1"),
        ("ConfigMap", "v1"),
        ("Pod", "v1"),
        ("ClusterRole", "rbac.authorization.k8s.io/v1"),
        ("ClusterRoleBinding", "rbac.authorization.k8s.io/v1"),
        ("DaemonSet", "apps/v1"),
        ("Kustomization", "kustomize.config.k8s.io/v1beta1"),
    ]
    .into();
    let mut kinds = BTreeSet::new();
    for (file, doc) in &docs {
        let kind = text(&doc["kind"], file);
        let api = known.get(kind).unwrap_or_else(|| panic!("{file}: unexpected kind {kind}"));
        assert_eq!(doc["apiVersion"], *api, "{file}: {kind}");
        if kind != "Kustomization" {
            assert!(doc["metadata"]["name"].is_string(), "{file}: {kind} without a name");
        }
        kinds.insert(kind);
        if kind != "Kustomization" {
            // The Kubernetes API's own types (k8s-openapi, API 1.32): field types, required fields, and no
            // field the API does not know.
            let back = typed(kind, doc).unwrap_or_else(|e| panic!("{file}: not a valid {kind}: {e}"));
            let mut lost = Vec::new();
            lost_fields(doc, &back, kind, &mut lost);
            assert!(lost.is_empty(), "{file}: fields unknown to the Kubernetes API: {lost:?}");
        }
    }
    assert_eq!(kinds.len(), known.len(), "every kind is there: {kinds:?}");

    // The kustomization lists every manifest but the example pod, and sets the namespace they are in.
    let kustomization = one(&docs, "Kustomization");
    let listed: BTreeSet<&str> = list(&kustomization["resources"]).iter().map(|r| text(r, "a resource")).collect();
    let files: BTreeSet<&str> = docs
        .iter()
        .filter(|(f, _)| f != "kustomization.yaml" && f != "example-pod.yaml")
        .map(|(f, _)| f.as_str())
        .collect();
    assert_eq!(listed, files);
    let namespace = text(&one(&docs, "Namespace")["metadata"]["name"], "the namespace");
    assert_eq!(kustomization["namespace"], namespace);
    for (file, doc) in docs.iter().filter(|(f, _)| files.contains(f.as_str())) {
        let kind = text(&doc["kind"], file);
        if !["Namespace", "ClusterRole", "ClusterRoleBinding"].contains(&kind) {
            assert_eq!(doc["metadata"]["namespace"], namespace, "{file}: {kind}");
        }
    }
    let image = text(&list(&kustomization["images"])[0]["name"], "the kustomization's image");
    let spec = pod_spec(&docs);
    for c in list(&spec["containers"]).iter().chain(list(&spec["initContainers"])) {
        let used = text(&c["image"], "image");
        assert!(used.split(':').next() == Some(image), "{used} is not the kustomization's image {image}");
    }

    // kubectl builds the kustomization (offline: no cluster here) into the same documents.
    let status = Command::new(repo().join("tools/apt-once.sh")).arg("kubernetes-client:kubectl").status();
    assert!(status.expect("run tools/apt-once.sh").success(), "kubectl is needed (tools/apt-once.sh failed)");
    let out = Command::new("kubectl").arg("kustomize").arg(manifests_dir()).output().expect("run kubectl");
    assert!(out.status.success(), "kubectl kustomize: {}", String::from_utf8_lossy(&out.stderr));
    let built = String::from_utf8(out.stdout).expect("UTF-8");
    let mut built_kinds: Vec<String> = serde_norway::Deserializer::from_str(&built)
        .map(|d| Value::deserialize(d).expect("kubectl's YAML")["kind"].as_str().unwrap_or("").to_string())
        .collect();
    built_kinds.sort();
    let mut expected: Vec<String> = docs
        .iter()
        .filter(|(f, _)| files.contains(f.as_str()))
        .map(|(_, d)| d["kind"].as_str().unwrap().to_string())
        .collect();
    expected.sort();
    assert_eq!(built_kinds, expected);
}

#[test]
fn the_daemonsets_arguments_are_accepted_by_tessera_and_its_host_paths_mounted() {
    let docs = documents();
    let config = config_data(&docs);
    let configmap = text(&one(&docs, "ConfigMap")["metadata"]["name"], "the ConfigMap's name");
    let volumes = host_paths(&docs);
    let daemon = container(&docs, "daemon");
    let plugin = container(&docs, "device-plugin");
    let daemon_env = environment(daemon, &config, configmap);
    let plugin_env = environment(plugin, &config, configmap);

    // The daemon's arguments parse (clap reads them all before acting on the final --help).
    let daemon_args = expand(list(&daemon["args"]), &daemon_env);
    assert_eq!(daemon_args[0], "daemon");
    let out = tessera().args(&daemon_args).arg("--help").output().expect("run tessera");
    assert!(out.status.success(), "tessera {daemon_args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let option = |name: &str| {
        let at = daemon_args.iter().position(|a| a == name).unwrap_or_else(|| panic!("the daemon has no {name}"));
        daemon_args[at + 1].clone()
    };
    let (region, socket, state_dir) = (option("--region"), option("--socket"), option("--state-dir"));

    // The plugin's are checked by the plugin itself, which prints what it would run with.
    let plugin_args = expand(list(&plugin["args"]), &plugin_env);
    let mut check = tessera();
    check.args(&plugin_args).arg("--check-config");
    for (k, v) in plugin_env.iter().filter(|(k, _)| k.as_str() != "TESSERA_LIB_DIR") {
        check.env(k, v);
    }
    let out = check.output().expect("run tessera");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "tessera {plugin_args:?} --check-config: {}", String::from_utf8_lossy(&out.stderr));
    let printed: BTreeMap<&str, &str> = stdout.lines().filter_map(|l| l.split_once(": ")).collect();
    let extras: Vec<&str> = stdout.lines().filter_map(|l| l.strip_prefix("extra resource: ")).collect();
    let resource = &config["resource"];
    assert_eq!(printed["resource"], resource);
    assert_eq!(printed["replicas"], config["replicas"]);
    assert_eq!(printed["gc-grace"], config["gc-grace"]);
    assert_eq!(
        extras,
        [
            format!("{resource}-memory on tessera-vgpu-memory.sock"),
            format!("{resource}-share on tessera-vgpu-share.sock")
        ]
    );

    // The plugin and the daemon agree on the region and the socket, and the plugin keeps its files in
    // the daemon's state directory.
    assert_eq!((printed["region"], printed["daemon socket"]), (region.as_str(), socket.as_str()), "{stdout}");
    assert_eq!(printed["state dir"], format!("{state_dir}/device-plugin"), "{stdout}");

    // Every path handed to kubelet or shared between the containers is a host path mounted where it is
    // on the host: kubelet's directory (the plugin), the region, socket and state dir (both), the libraries
    // whose libtessera.so containers get (both, and the init container that fills them).
    let dir = printed["dir"];
    assert!(mounted_as_on_host(plugin, &volumes, dir), "the plugin's --dir {dir} is not mounted");
    assert_eq!(volumes.values().filter(|p| *p == "/var/lib/kubelet/device-plugins").count(), 1);
    let libs = &plugin_env["TESSERA_LIB_DIR"];
    assert_eq!(daemon_env.get("TESSERA_LIB_DIR"), Some(libs));
    for c in [daemon, plugin] {
        for path in [&region, &socket, &state_dir, libs] {
            assert!(mounted_as_on_host(c, &volumes, path), "{path} is not mounted in {}", c["name"]);
        }
        assert_eq!(c["securityContext"]["privileged"], true, "{}: opens /dev/nvidia*", c["name"]);
    }
    let init = container(&docs, "install-libraries");
    assert!(mounted_as_on_host(init, &volumes, libs), "the init container does not fill {libs}");
    let script = list(&init["args"]).iter().map(|a| text(a, "an argument")).collect::<String>();
    assert!(script.contains(libs.as_str()) && script.contains("/usr/local/lib/tessera/"), "{script}");
    let mounts: BTreeSet<&str> = [daemon, plugin, init]
        .into_iter()
        .flat_map(|c| list(&c["volumeMounts"]))
        .map(|m| text(&m["name"], "mount"))
        .collect();
    assert_eq!(mounts, volumes.keys().map(String::as_str).collect(), "every volume is mounted, every mount a volume");
    assert_eq!(plugin_env["NODE_NAME"], "node-1", "NODE_NAME from the downward API");

    // Every ConfigMap key is consumed by the plugin, through a variable its arguments use.
    let raw_args: String = list(&plugin["args"]).iter().map(|a| text(a, "an argument")).collect();
    for key in config.keys() {
        let var = list(&plugin["env"])
            .iter()
            .find(|v| v.pointer("/valueFrom/configMapKeyRef/key").and_then(Value::as_str) == Some(key))
            .unwrap_or_else(|| panic!("ConfigMap key {key} is not consumed"));
        let name = text(&var["name"], key);
        assert!(raw_args.contains(&format!("$({name})")), "{name} (ConfigMap key {key}) is not used in the args");
    }
}

#[test]
fn rbac_lets_the_daemonsets_service_account_read_pods_only() {
    let docs = documents();
    let account = one(&docs, "ServiceAccount");
    let name = text(&account["metadata"]["name"], "the ServiceAccount's name");
    assert_eq!(pod_spec(&docs)["serviceAccountName"], name);
    let role = one(&docs, "ClusterRole");
    let rules = list(&role["rules"]);
    assert_eq!(rules.len(), 1, "{rules:?}");
    let strings = |v: &Value| -> BTreeSet<String> { list(v).iter().map(|s| text(s, "a rule").to_string()).collect() };
    assert_eq!(strings(&rules[0]["apiGroups"]), ["".to_string()].into());
    assert_eq!(strings(&rules[0]["resources"]), ["pods".to_string()].into());
    assert_eq!(strings(&rules[0]["verbs"]), ["get", "list", "watch"].map(String::from).into());
    let binding = one(&docs, "ClusterRoleBinding");
    assert_eq!(binding["roleRef"]["kind"], "ClusterRole");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let subjects = list(&binding["subjects"]);
    assert_eq!(subjects.len(), 1);
    assert_eq!(subjects[0]["kind"], "ServiceAccount");
    assert_eq!(subjects[0]["name"], name);
    assert_eq!(subjects[0]["namespace"], account["metadata"]["namespace"]);
}

#[test]
fn the_example_pod_asks_for_two_replicas_4_gib_and_30_percent() {
    let docs = documents();
    let pod = one(&docs, "Pod");
    let resource = config_data(&docs)["resource"].clone();
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(annotations[format!("{resource}-memory")], "4Gi");
    assert_eq!(annotations[format!("{resource}-share")], "30");
    let containers = list(&pod["spec"]["containers"]);
    assert_eq!(containers.len(), 1);
    let limit = &containers[0]["resources"]["limits"][resource.as_str()];
    assert!(limit == 2 || limit == "2", "the pod asks for {limit} {resource}");
}

#[test]
fn the_dockerfile_installs_what_the_daemonset_runs() {
    let dockerfile =
        std::fs::read_to_string(repo().join("deploy/docker/Dockerfile")).expect("deploy/docker/Dockerfile");
    assert!(dockerfile.contains("RUN tools/install.sh --prefix"), "it installs with tools/install.sh");
    assert!(dockerfile.contains("ENTRYPOINT [\"/usr/local/bin/tessera\"]"), "{dockerfile}");
    assert!(dockerfile.contains(" /usr/local/lib/tessera/"), "the libraries go where the init container copies from");
    let ignore =
        std::fs::read_to_string(repo().join("deploy/docker/Dockerfile.dockerignore")).expect("its .dockerignore");
    assert!(ignore.lines().any(|l| l.trim() == "target"), "the build tree stays out of the context");
    let docs = documents();
    // The DaemonSet's containers run the image's entry point with their args (no command of their own).
    for name in ["daemon", "device-plugin"] {
        assert!(container(&docs, name).get("command").is_none(), "{name} overrides the entry point");
    }
}
