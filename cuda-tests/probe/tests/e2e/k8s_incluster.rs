//! The device plugin inside a cluster: no `--kubeconfig`, `KUBERNETES_SERVICE_HOST`/`_PORT` set, and the
//! pod's service account in `/var/run/secrets/kubernetes.io/serviceaccount/` (`token`, `ca.crt`,
//! `namespace`). The plugin runs in a private mount namespace (`unshare --mount`, as root) where a tmpfs
//! covers `/var/run` and the test's own service-account directory is bind-mounted at that path, so the
//! host's `/var/run` is never touched. The fake API server (`common/fake_kube.rs`) is reached over HTTPS:
//! a TLS front on 127.0.0.1 with a certificate for that address signed by a CA made here (rcgen) and
//! written as `ca.crt`, relaying to the plain server, which answers only `Authorization: Bearer <the token
//! file>`. An `Allocate` sized by the pod's annotations shows the plugin used the service account; a
//! server whose certificate `ca.crt` did not sign is refused; a service account that cannot be used
//! (missing or empty token, no `ca.crt`, a bad port) stops the plugin at start naming the problem.

use crate::common;
use crate::common::fake_kube;
use crate::common::kubelet;

use common::Guarded;
use common::tessera::Machine;
use fake_kube::{FakeApi, pod};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tessera_deviceplugin::kube_api::SERVICE_ACCOUNT_DIR;
use tessera_deviceplugin::v1beta1::device_plugin_client::DevicePluginClient;
use tessera_deviceplugin::v1beta1::{AllocateRequest, AllocateResponse, ContainerAllocateRequest};

/// The node the plugin runs on.
const NODE: &str = "node-a";

/// A certificate authority made for one test, and a server certificate for 127.0.0.1 it signed.
struct Pki {
    ca_pem: String,
    server_cert: rustls::pki_types::CertificateDer<'static>,
    server_key: rustls::pki_types::PrivateKeyDer<'static>,
}

impl Pki {
    /// A fresh CA (`name` as its common name) and a server certificate signed by it.
    fn new(name: &str) -> Pki {
        use rcgen::KeyUsagePurpose::{CrlSign, DigitalSignature, KeyCertSign};
        use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate().expect("a CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, name);
        ca.key_usages = vec![KeyCertSign, CrlSign, DigitalSignature];
        let ca_pem = ca.self_signed(&ca_key).expect("self-sign the CA").pem();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().expect("a server key");
        let mut server = CertificateParams::new(vec!["127.0.0.1".to_string()]).expect("server parameters");
        server.distinguished_name.push(DnType::CommonName, "kube-apiserver");
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = server.signed_by(&key, &issuer).expect("sign the server certificate");
        let server_key = rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der()).into();
        Pki { ca_pem, server_cert: cert.der().clone(), server_key }
    }
}

/// A TLS front for a [`FakeApi`]: accepts TLS on a free port of 127.0.0.1 with `pki`'s server certificate
/// and relays each connection, decrypted, to the plain server. Stopped when dropped.
struct TlsFront {
    port: u16,
    handshakes: Arc<AtomicUsize>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TlsFront {
    fn start(pki: &Pki, backend: std::net::SocketAddr) -> TlsFront {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(vec![pki.server_cert.clone()], pki.server_key.clone_key())
            .expect("the server certificate and key");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the TLS front");
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let port = listener.local_addr().unwrap().port();
        let handshakes = Arc::new(AtomicUsize::new(0));
        let counted = handshakes.clone();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build().expect("a runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
                loop {
                    let (tcp, _) = tokio::select! {
                        _ = &mut stopped => return,
                        accepted = listener.accept() => match accepted { Ok(a) => a, Err(_) => continue },
                    };
                    let (acceptor, counted) = (acceptor.clone(), counted.clone());
                    tokio::spawn(async move {
                        // A client refusing the certificate ends its handshake: nothing to relay.
                        let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                        counted.fetch_add(1, Ordering::SeqCst);
                        let Ok(mut plain) = tokio::net::TcpStream::connect(backend).await else { return };
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                    });
                }
            });
        });
        TlsFront { port, handshakes, stop: Some(stop), thread: Some(thread) }
    }

    /// TLS handshakes completed so far.
    fn handshakes(&self) -> usize {
        self.handshakes.load(Ordering::SeqCst)
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A service-account directory `dir` (created) holding `files` (name, contents).
fn service_account(dir: &Path, files: &[(&str, &str)]) -> PathBuf {
    std::fs::create_dir_all(dir).expect("create the service-account directory");
    for (name, text) in files {
        std::fs::write(dir.join(name), text).expect("write a service-account file");
    }
    dir.to_path_buf()
}

/// The shell run by `unshare` in the new mount namespace: a tmpfs over `/var/run` (so that the mount
/// point is made there, not on the host), the account bind-mounted at [`SERVICE_ACCOUNT_DIR`], then the
/// plugin. `$0` is the account's directory, `$@` the plugin's command line.
fn mount_script() -> String {
    format!(
        "mount -t tmpfs tmpfs /var/run && mkdir -p {SERVICE_ACCOUNT_DIR} && mount --bind \"$0\" {SERVICE_ACCOUNT_DIR} && exec \"$@\""
    )
}

/// `tessera k8s device-plugin --dir DIR --node-name node-a` on `m` as a pod would run it: in a private
/// mount namespace seeing `account` as its service account, `KUBERNETES_SERVICE_HOST=127.0.0.1` and
/// `KUBERNETES_SERVICE_PORT=port`.
fn in_cluster(m: &Machine, account: &Path, port: &str, dir: &Path) -> Command {
    let tessera = common::tessera::tessera();
    let (script, account, tessera) = (mount_script(), account.to_str().unwrap(), tessera.to_str().unwrap());
    let dir = dir.to_str().unwrap();
    let args = ["--mount", "--propagation", "private", "sh", "-c", &script, account, tessera];
    let plugin = ["k8s", "device-plugin", "--dir", dir, "--node-name", NODE];
    let mut cmd = m.sim.command_for("unshare", &[&args[..], &plugin].concat());
    cmd.env("KUBERNETES_SERVICE_HOST", "127.0.0.1").env("KUBERNETES_SERVICE_PORT", port).stdin(Stdio::null());
    cmd
}

/// Fails the test at once, saying why, where a private mount namespace cannot be made (not root, no
/// `unshare`): the tests below need one.
fn assert_mount_namespaces_work() {
    let out = Command::new("unshare").args(["--mount", "--propagation", "private", "true"]).output();
    let ok = out.as_ref().is_ok_and(|o| o.status.success());
    assert!(ok, "these tests run the plugin under `unshare --mount` (root and util-linux needed): {out:?}");
}

/// The simulated kubelet's directory on machine `m` (created).
fn plugin_dir(m: &Machine, name: &str) -> PathBuf {
    let dir = m.file(name);
    std::fs::create_dir_all(&dir).expect("create the device-plugin directory");
    dir
}

/// `Allocate` of one container for replica `replica` of GPU `uuid`.
async fn allocate(
    plugin: &mut DevicePluginClient<tonic::transport::Channel>,
    uuid: &str,
    replica: u32,
) -> Result<AllocateResponse, tonic::Status> {
    let ids = vec![format!("{uuid}-{replica}")];
    let request = AllocateRequest { container_requests: vec![ContainerAllocateRequest { devices_ids: ids }] };
    plugin.allocate(request).await.map(tonic::Response::into_inner)
}

/// A token unlike any other test's.
fn token() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("sa-token-{}-{nanos}", std::process::id())
}

#[test]
fn allocate_sizes_the_vgpu_through_the_in_cluster_service_account() {
    assert_mount_namespaces_work();
    let mut m = Machine::new("k8s-incluster", "small");
    m.start();
    let token = token();
    let api = FakeApi::start(&token);
    let pki = Pki::new("tessera test cluster CA");
    let front = TlsFront::start(&pki, api.addr());
    let port = front.port.to_string();
    let notes = [("tessera.io/vgpu-memory", "640Mi"), ("tessera.io/vgpu-share", "30")];
    api.add(pod("annotated", NODE, 1, 1, &[], &notes));
    api.add(pod("signed-elsewhere", NODE, 2, 1, &[], &notes));
    let uuid = m.client().stats(None).unwrap().devices[0].uuid.clone().expect("a UUID");

    // The token file as Kubernetes writes it (no newline), the cluster's CA, the pod's namespace.
    let files = [("token", token.as_str()), ("ca.crt", pki.ca_pem.as_str()), ("namespace", "tessera-system")];
    let account = service_account(&m.file("serviceaccount"), &files);
    // First a plugin whose ca.crt is another CA's: the server's certificate is refused, so no pod is
    // listed and no vGPU made (Unavailable, as when the API cannot be reached).
    let other = Pki::new("another CA");
    let files = [("token", token.as_str()), ("ca.crt", other.ca_pem.as_str()), ("namespace", "tessera-system")];
    let wrong_ca = service_account(&m.file("serviceaccount-wrong-ca"), &files);
    let other_dir = plugin_dir(&m, "device-plugins-wrong-ca");
    let mut cmd = in_cluster(&m, &wrong_ca, &port, &other_dir);
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let _other_plugin = Guarded::spawn(&mut cmd).expect("start the plugin with the wrong CA under unshare");

    kubelet::runtime().block_on(async {
        let mut client = kubelet::dial_when_served(&other_dir, "tessera-vgpu.sock").await;
        let status = allocate(&mut client, &uuid, 5).await.expect_err("a server the CA did not sign is refused");
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        assert!(status.message().contains("the in-cluster service account (https://127.0.0.1:"), "{status:?}");
        assert!(m.client().list().unwrap().is_empty(), "a refused Allocate made a vGPU");
        assert!(api.requests().is_empty(), "a request passed a refused certificate: {:?}", api.requests());
    });

    // Then the plugin with the cluster's CA.
    let dir = plugin_dir(&m, "device-plugins");
    let log = m.file("plugin.log");
    let mut cmd = in_cluster(&m, &account, &port, &dir);
    cmd.stdout(Stdio::null()).stderr(std::fs::File::create(&log).unwrap());
    let plugin = Guarded::spawn(&mut cmd).expect("start the plugin under unshare");

    kubelet::runtime().block_on(async {
        let mut client = kubelet::dial_when_served(&dir, "tessera-vgpu.sock").await;
        let response = allocate(&mut client, &uuid, 0).await.expect("Allocate for pod annotated");
        let name = response.container_responses[0].envs["TESSERA_VGPU"].clone();
        let vgpu = m.client().show(&name).expect("the vGPU exists in the daemon");
        assert_eq!((vgpu.spec.memory, vgpu.spec.share), (640 << 20, 30), "sized by the pod's annotations");
    });
    let requests = api.requests();
    assert!(!requests.is_empty() && front.handshakes() > 0, "no request came over TLS");
    assert!(requests.iter().all(|r| r.contains("fieldSelector=spec.nodeName%3Dnode-a")), "{requests:?}");
    let said = std::fs::read_to_string(&log).unwrap();
    let source = format!("through the in-cluster service account (https://127.0.0.1:{port}/)");
    assert!(said.contains(&source), "{said}");
    let records = std::fs::read_to_string(m.file("state/device-plugin/pods.json")).expect("pods.json");
    assert!(records.contains("uid-annotated"), "{records}");
    drop(plugin);
}

/// A service account that cannot be used: its case name, its files, `KUBERNETES_SERVICE_PORT`, and what
/// the plugin must say.
type Broken<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str, String);

#[test]
fn a_service_account_that_cannot_be_used_stops_the_plugin_naming_it() {
    assert_mount_namespaces_work();
    let m = Machine::new("k8s-incluster-bad", "small");
    let pki = Pki::new("tessera test cluster CA");
    let dir = plugin_dir(&m, "device-plugins");
    let ca = pki.ca_pem.as_str();
    let cases: [Broken; 5] = [
        (
            "no-token",
            &[("ca.crt", ca), ("namespace", "ns")],
            "6443",
            format!("{SERVICE_ACCOUNT_DIR}/token: No such file"),
        ),
        (
            "empty-token",
            &[("token", "\n"), ("ca.crt", ca), ("namespace", "ns")],
            "6443",
            format!("{SERVICE_ACCOUNT_DIR}/token is empty"),
        ),
        (
            "no-ca",
            &[("token", "t"), ("namespace", "ns")],
            "6443",
            format!("{SERVICE_ACCOUNT_DIR}/ca.crt: No such file"),
        ),
        (
            "bad-ca",
            &[("token", "t"), ("ca.crt", "not a certificate"), ("namespace", "ns")],
            "6443",
            format!("{SERVICE_ACCOUNT_DIR}/ca.crt holds no PEM certificate"),
        ),
        (
            "bad-port",
            &[("token", "t"), ("ca.crt", ca), ("namespace", "ns")],
            "https",
            "KUBERNETES_SERVICE_PORT=\"https\" is not a port number".into(),
        ),
    ];
    for (case, files, port, says) in cases {
        let account = service_account(&m.file(case), files);
        let out = in_cluster(&m, &account, port, &dir).output().expect("run the plugin under unshare");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{case}: the plugin should stop at start; stderr: {stderr}");
        assert!(
            stderr.contains("KUBERNETES_SERVICE_HOST is set but the in-cluster service account cannot be used"),
            "{case}: {stderr}"
        );
        assert!(stderr.contains(&says), "{case}: {stderr}");
    }
}
