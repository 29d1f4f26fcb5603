//! The C test programs of `cuda-tests/c/`: NVIDIA's `cuda.h` installed on demand (never a silent skip),
//! one way to compile them with gcc, the dynamic symbols of a binary (`nm -D`), and their output: one
//! "key value" fact per line (`cuda-tests/c/report.h`).

use super::{build_dir, library_folder};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// The workspace's root folder.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `ffi/data/proc-address-table.tsv`, the real driver's probed `cuGetProcAddress` answers.
pub fn proc_address_table() -> PathBuf {
    workspace().join("ffi/data/proc-address-table.tsv")
}

/// Output of a command that must have succeeded, with everything it printed on failure.
fn succeeded(what: &str, out: std::io::Result<Output>) -> Output {
    let out = out.unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The folder holding NVIDIA's `cuda.h` (CUDA 12), installed by `tools/cuda-headers.sh` when missing.
pub fn cuda_include_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| runtime_include_dir("12")).clone()
}

/// The include folder of NVIDIA's CUDA 13 runtime package (`libcudart.so.13` in `../lib` beside it),
/// installed by `tools/cuda-headers.sh` when missing.
pub fn cuda13_include_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| runtime_include_dir("13")).clone()
}

/// `tools/cuda-headers.sh TARGET MAJOR`: the include folder it installed or found.
fn runtime_include_dir(major: &str) -> PathBuf {
    let target = build_dir().parent().expect("the build folder is inside the target folder").to_path_buf();
    let script = workspace().join("tools/cuda-headers.sh");
    let out = succeeded(
        &format!("tools/cuda-headers.sh {major} (needs python3 with pip)"),
        Command::new(&script).arg(&target).arg(major).output(),
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// One C program (or shared library) of `cuda-tests/c/` to compile.
pub struct CBuild {
    source: &'static str,
    name: String,
    flags: Vec<String>,
    libraries: Vec<String>,
    /// The folder of the `cuda.h` it is compiled against (default: CUDA 12's, [`cuda_include_dir`]).
    headers: Option<PathBuf>,
}

impl CBuild {
    /// The program built from `cuda-tests/c/<source>`, named after it.
    pub fn program(source: &'static str) -> CBuild {
        let name = source.trim_end_matches(".c").to_string();
        CBuild { source, name, flags: vec!["-fPIE".into(), "-pie".into()], libraries: Vec::new(), headers: None }
    }

    /// A shared library built from `cuda-tests/c/<source>`, named `lib<stem>.so`.
    pub fn library(source: &'static str) -> CBuild {
        let name = format!("lib{}.so", source.trim_end_matches(".c"));
        CBuild { source, name, flags: vec!["-fPIC".into(), "-shared".into()], libraries: Vec::new(), headers: None }
    }

    /// Names the output (for several builds of one source).
    pub fn named(mut self, name: &str) -> CBuild {
        self.name = name.into();
        self
    }

    /// Compiles against the `cuda.h` in `dir` (CUDA 13's: [`cuda13_include_dir`]).
    pub fn cuda_headers(mut self, dir: PathBuf) -> CBuild {
        self.headers = Some(dir);
        self
    }

    /// Adds `-D<definition>`.
    pub fn define(mut self, definition: &str) -> CBuild {
        self.flags.push(format!("-D{definition}"));
        self
    }

    /// Links to `libcuda.so.1` in the simulated GPU's library folder, as a program linked to the driver.
    pub fn link_driver(mut self) -> CBuild {
        self.libraries.push(format!("-L{}", library_folder().display()));
        self.libraries.push("-l:libcuda.so.1".into());
        self
    }

    /// Adds a compiler flag (an include folder, `-pthread`).
    pub fn flag(mut self, flag: &str) -> CBuild {
        self.flags.push(flag.into());
        self
    }

    /// Links to the library file `file` (`libcudart.so.12`) in `dir` (found there at run time too).
    pub fn link_file(mut self, dir: &Path, file: &str) -> CBuild {
        self.libraries.push(format!("-L{}", dir.display()));
        self.libraries.push(format!("-Wl,-rpath,{}", dir.display()));
        self.libraries.push(format!("-l:{file}"));
        self
    }

    /// Links to `lib<name>.so` of the build folder (found there at run time too).
    pub fn link_built(mut self, name: &str) -> CBuild {
        self.libraries.push(format!("-L{}", build_dir().display()));
        self.libraries.push(format!("-Wl,-rpath,{}", build_dir().display()));
        self.libraries.push(format!("-l{name}"));
        self
    }

    /// Compiles into `<build dir>/c-tests/` and returns the output's path. Written under a temporary
    /// name and renamed, so concurrent test processes never run a half-written file.
    pub fn build(self) -> PathBuf {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let dir = build_dir().join("c-tests");
        std::fs::create_dir_all(&dir).expect("create the C test output folder");
        let out = dir.join(&self.name);
        let tmp = dir.join(format!(".{}.{}.{}", self.name, std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)));
        let sources = workspace().join("cuda-tests/c");
        let mut gcc = Command::new("gcc");
        gcc.args(["-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE"])
            .arg(format!("-I{}", self.headers.clone().unwrap_or_else(cuda_include_dir).display()))
            .arg(format!("-I{}", sources.display()))
            .arg(format!("-DTESSERA_KERNELS_DIR=\"{}\"", workspace().join("cuda-tests/kernels").display()))
            .args(&self.flags)
            .arg("-o")
            .arg(&tmp)
            .arg(sources.join(self.source))
            .args(&self.libraries)
            .arg("-ldl");
        succeeded(&format!("gcc {}", self.source), gcc.output());
        std::fs::rename(&tmp, &out).expect("move the compiled program in place");
        out
    }
}

/// Which of a binary's dynamic symbols [`dynamic_symbols`] lists.
#[derive(Clone, Copy)]
pub enum Symbols {
    /// Those it defines (exports).
    Defined,
    /// Those it needs from other objects.
    Undefined,
}

/// The dynamic symbols of `binary` (from `nm -D`), without version suffixes.
pub fn dynamic_symbols(binary: &Path, which: Symbols) -> BTreeSet<String> {
    let flag = match which {
        Symbols::Defined => "--defined-only",
        Symbols::Undefined => "--undefined-only",
    };
    let out =
        succeeded(&format!("nm -D {}", binary.display()), Command::new("nm").arg("-D").arg(flag).arg(binary).output());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().last())
        .map(|name| name.split('@').next().unwrap_or(name).to_string())
        .collect()
}

/// The CUDA and NVML entry points `libtessera.so` exports: the functions it intercepts.
pub fn shim_hooks() -> BTreeSet<String> {
    dynamic_symbols(&super::shim_path(), Symbols::Defined)
        .into_iter()
        .filter(|s| s.starts_with("cu") || s.starts_with("nvml"))
        .collect()
}

/// What a C test program printed: its facts (a key may repeat), its stderr, and whether it succeeded.
#[derive(Debug)]
pub struct Facts {
    lines: BTreeMap<String, Vec<String>>,
    /// Everything written to stderr (the shim's log lines).
    pub stderr: String,
    /// Everything written to stdout, for failure messages.
    pub stdout: String,
    /// True when the program exited with status 0.
    pub success: bool,
}

impl Facts {
    /// Runs `cmd` to completion and reads its facts.
    pub fn run(mut cmd: Command) -> Facts {
        let out = cmd.stdin(std::process::Stdio::null()).output().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        Facts::from_output(&out)
    }

    /// The facts of a program that has finished (e.g. one a test spawned and talked to).
    pub fn from_output(out: &Output) -> Facts {
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut lines: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for line in stdout.lines() {
            let (key, value) = line.split_once(' ').unwrap_or((line, ""));
            lines.entry(key.to_string()).or_default().push(value.to_string());
        }
        Facts {
            lines,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            stdout,
            success: out.status.success(),
        }
    }

    /// Runs `cmd` and fails the test unless it succeeded and printed `done ok`.
    pub fn ok(cmd: Command) -> Facts {
        Facts::run(cmd).succeeded()
    }

    /// The facts, failing the test unless the program succeeded and printed `done ok`.
    pub fn succeeded(self) -> Facts {
        assert!(
            self.success && self.opt("done") == Some("ok"),
            "the C program failed\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    /// The value of `key` (its first, when repeated), if printed.
    pub fn opt(&self, key: &str) -> Option<&str> {
        self.lines.get(key).and_then(|v| v.first()).map(String::as_str)
    }

    /// The value of `key`, failing the test when it was not printed.
    pub fn get(&self, key: &str) -> &str {
        self.opt(key).unwrap_or_else(|| panic!("no {key:?} in the output:\n{}", self.stdout))
    }

    /// The value of `key` as an integer.
    pub fn num(&self, key: &str) -> i64 {
        let v = self.get(key);
        v.parse().unwrap_or_else(|_| panic!("{key} = {v:?} is not an integer"))
    }

    /// Every value printed for `key`.
    pub fn all(&self, key: &str) -> Vec<&str> {
        self.lines.get(key).map(|v| v.iter().map(String::as_str).collect()).unwrap_or_default()
    }

    /// Every `(key, value)` whose key starts with `prefix`, with the prefix removed.
    pub fn with_prefix<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.lines.iter().filter_map(move |(k, v)| Some((k.strip_prefix(prefix)?, v.first()?.as_str())))
    }
}

/// `cuda-tests/c/direct.c` (linked to the driver), built normally or with
/// `CUDA_API_PER_THREAD_DEFAULT_STREAM`, against CUDA 12's `cuda.h`.
pub fn direct_program(per_thread: bool) -> PathBuf {
    direct_program_for(12, per_thread)
}

/// [`direct_program`] against the `cuda.h` of CUDA `major` (12 or 13).
pub fn direct_program_for(major: u32, per_thread: bool) -> PathBuf {
    let headers = if major == 13 { cuda13_include_dir() } else { cuda_include_dir() };
    let build = CBuild::program("direct.c").link_driver().cuda_headers(headers);
    let name = if major == 13 { "direct13" } else { "direct" };
    if per_thread {
        build.named(&format!("{name}-ptds")).define("CUDA_API_PER_THREAD_DEFAULT_STREAM=1").build()
    } else {
        build.named(name).build()
    }
}

/// The memory a program sees under `quota` is the quota once quotas are enforced (and allocating above it
/// fails with `CUDA_ERROR_OUT_OF_MEMORY`), or still the device's; never anything else, nor half of each.
pub fn assert_quota_view(quota: u64, total: u64, device: u64, over_quota_alloc: Option<i64>) {
    assert!(
        total == quota || total == device,
        "total memory {total} is neither the quota {quota} nor the device's {device}"
    );
    if let Some(code) = over_quota_alloc {
        let expected = if total == quota { super::OUT_OF_MEMORY as i64 } else { 0 };
        assert_eq!(code, expected, "an allocation above the quota with a total of {total} returned {code}");
    }
}

/// `benches/c/overhead.c`, the `overhead` benchmark's client, compiled as the benchmark compiles it (gcc,
/// NVIDIA's cuda.h, linked to the simulated libcuda.so.1), once per test process (tests run in parallel).
pub fn overhead_client() -> PathBuf {
    static CLIENT: OnceLock<PathBuf> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let dir = build_dir().join("c-tests");
            std::fs::create_dir_all(&dir).expect("create the C test output folder");
            let out = dir.join(format!("overhead-{}", std::process::id()));
            let mut gcc = Command::new("gcc");
            gcc.args(["-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread"])
                .arg(format!("-I{}", cuda_include_dir().display()))
                .arg(format!("-DTESSERA_KERNELS_DIR=\"{}\"", workspace().join("tools/kernels").display()))
                .arg("-o")
                .arg(&out)
                .arg(workspace().join("benches/c/overhead.c"))
                .arg(format!("-L{}", library_folder().display()))
                .args(["-l:libcuda.so.1", "-ldl"]);
            succeeded("gcc benches/c/overhead.c", gcc.output());
            out
        })
        .clone()
}

/// The path of `ptxas`, installed into the target folder on first use (never a silent skip).
pub fn ptxas() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| installed_tool("tools/ptxas.sh", "nvidia-cuda-nvcc-cu12")).clone()
}

/// The path of NVIDIA's `nvcc` (CUDA 13.0), installed into the target folder on first use (never a
/// silent skip).
pub fn nvcc() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| installed_tool("tools/nvcc.sh", "nvidia-cuda-nvcc and its parts")).clone()
}

/// Runs `script` (one of the tools that install a program from PyPI into the target folder the first
/// time, `packages`) and gives the path it prints.
fn installed_tool(script: &str, packages: &str) -> PathBuf {
    let target = build_dir().parent().expect("the build folder is inside the target folder").to_path_buf();
    let out = Command::new(workspace().join(script))
        .arg(&target)
        .output()
        .unwrap_or_else(|e| panic!("cannot start {script}: {e}"));
    assert!(
        out.status.success(),
        "{script} could not provide its program (it installs {packages} from PyPI the first time: needs \
         python3, pip and the network): {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(path.is_file(), "{script} printed {}, which is not a file", path.display());
    path
}

/// `module` (a PTX file) assembled by `ptxas` for `arch`: the cubin's bytes, or ptxas's own message.
pub fn assemble(module: &Path, arch: &str) -> Result<Vec<u8>, String> {
    assemble_with(module, arch, &[])
}

/// [`assemble`] with more `ptxas` options (`-c`: a relocatable object, as `-rdc` builds make).
pub fn assemble_with(module: &Path, arch: &str, options: &[&str]) -> Result<Vec<u8>, String> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let out_dir = build_dir().join("ptxas-out");
    std::fs::create_dir_all(&out_dir).expect("create the ptxas output folder");
    let stem = module.to_string_lossy().replace('/', "_");
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let cubin = out_dir.join(format!("{stem}.{arch}.{}.{seq}.cubin", std::process::id()));
    let out = Command::new(ptxas())
        .arg(format!("-arch={arch}"))
        .args(options)
        .arg("-o")
        .arg(&cubin)
        .arg(module)
        .output()
        .unwrap_or_else(|e| panic!("cannot start ptxas: {e}"));
    let bytes = std::fs::read(&cubin);
    let _ = std::fs::remove_file(&cubin);
    match (out.status.success(), bytes) {
        (true, Ok(bytes)) => Ok(bytes),
        (_, bytes) => Err(format!(
            "ptxas -arch={arch} {} {}: {}\n{}{}{}",
            options.join(" "),
            module.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            bytes.err().map(|e| format!("(no cubin: {e})")).unwrap_or_default()
        )),
    }
}
