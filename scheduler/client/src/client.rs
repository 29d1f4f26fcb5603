//! The client: one connection per request to the daemon's unix socket, one request line, one reply
//! line, with a timeout; every failure an [`Error`] with its [`ErrorCode`]. A reply of another protocol
//! version is an error naming both versions.

use crate::devices::{BindReport, Gpu, Mdev, MdevType, ReconcileReport};
use crate::error::{Error, ErrorCode};
use crate::spec::{Change, VgpuSpec};
use crate::stats::Stats;
use crate::wire::{PagerReport, Reply, Request, VERSION, VgpuStatus};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long the daemon may take to answer by default (a request that waits for processes gets longer,
/// see [`Request::answer_within`]).
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// A client of the daemon listening on one socket.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
    timeout: Duration,
}

impl Client {
    /// A client of the daemon at `socket`, answering within [`TIMEOUT`].
    pub fn new(socket: impl Into<PathBuf>) -> Client {
        Client { socket: socket.into(), timeout: TIMEOUT }
    }

    /// The same client with another timeout for each request (requests that wait for processes get
    /// [`crate::DEFRAG_TIMEOUT`] more).
    pub fn with_timeout(self, timeout: Duration) -> Client {
        Client { timeout, ..self }
    }

    /// The socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Sends `request` and returns the daemon's successful reply; a refusal is an `Err` with the daemon's
    /// code and message.
    pub fn request(&self, request: &Request) -> Result<Reply, Error> {
        let reply = self.exchange(request)?;
        if reply.ok {
            return Ok(reply);
        }
        let message = reply.error.unwrap_or_else(|| "the daemon refused the request without saying why".into());
        Err(Error::new(reply.code.unwrap_or(ErrorCode::Unknown), message))
    }

    /// Sends `request` and returns the reply whatever it says, once it is known to be of this version.
    fn exchange(&self, request: &Request) -> Result<Reply, Error> {
        let shown = self.socket.display();
        let line = request.to_line().map_err(|e| Error::new(ErrorCode::BadRequest, format!("cannot encode: {e}")))?;
        let stream = self.connect()?;
        let io = |e: std::io::Error| {
            let code = match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => ErrorCode::Timeout,
                _ => ErrorCode::Unavailable,
            };
            Error::new(code, format!("talking to the daemon on {shown}: {e}"))
        };
        stream.set_read_timeout(Some(request.answer_within(self.timeout))).map_err(io)?;
        stream.set_write_timeout(Some(self.timeout)).map_err(io)?;
        (&stream).write_all(format!("{line}\n").as_bytes()).map_err(io)?;
        let mut answer = String::new();
        BufReader::new(&stream).read_line(&mut answer).map_err(io)?;
        if answer.is_empty() {
            return Err(Error::new(
                ErrorCode::Unavailable,
                format!("the daemon on {shown} closed the connection without answering"),
            ));
        }
        let reply: Reply = serde_json::from_str(&answer).map_err(|e| {
            Error::new(ErrorCode::BadReply, format!("the daemon on {shown} answered something unreadable ({e})"))
        })?;
        match reply.version {
            Some(VERSION) => Ok(reply),
            Some(other) => Err(Error::new(
                ErrorCode::UnsupportedVersion,
                format!(
                    "the daemon on {shown} (pid {}) speaks protocol version {other}, this client version {VERSION}; \
                     use the tessera of the daemon's release, or restart the daemon with this one",
                    reply.pid
                ),
            )),
            None => Err(Error::new(
                ErrorCode::UnsupportedVersion,
                format!(
                    "the daemon on {shown} (pid {}) is older than protocol versions, this client speaks version \
                     {VERSION}; restart the daemon with this tessera",
                    reply.pid
                ),
            )),
        }
    }

    /// Connects, refusing a socket of another user (it could pose as the daemon).
    fn connect(&self) -> Result<UnixStream, Error> {
        let shown = self.socket.display();
        let meta = std::fs::metadata(&self.socket).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::new(
                ErrorCode::Unavailable,
                format!(
                    "no Tessera daemon: {shown} does not exist; start one with `tessera daemon` (or set TESSERA_SOCKET)"
                ),
            ),
            _ => Error::new(ErrorCode::Unavailable, format!("socket {shown}: {e}")),
        })?;
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me && me != 0 {
            return Err(Error::new(
                ErrorCode::PermissionDenied,
                format!("socket {shown} belongs to uid {}, not to you (uid {me}); refusing to use it", meta.uid()),
            ));
        }
        UnixStream::connect(&self.socket).map_err(|e| match e.kind() {
            std::io::ErrorKind::ConnectionRefused => Error::new(
                ErrorCode::Unavailable,
                format!("no daemon listens on {shown} (it has stopped); start one with `tessera daemon`"),
            ),
            std::io::ErrorKind::PermissionDenied => Error::new(
                ErrorCode::PermissionDenied,
                format!("permission denied on {shown}: only the daemon's owner may manage vGPUs"),
            ),
            _ => Error::new(ErrorCode::Unavailable, format!("cannot connect to {shown}: {e}")),
        })
    }

    /// The daemon's protocol version and release; answered whatever version the client speaks.
    pub fn version(&self) -> Result<(u32, String), Error> {
        let reply = self.request(&Request::Version)?;
        Ok((reply.version.unwrap_or(0), reply.release.unwrap_or_default()))
    }

    /// Every vGPU.
    pub fn list(&self) -> Result<Vec<VgpuStatus>, Error> {
        Ok(self.request(&Request::List)?.vgpus)
    }

    /// One vGPU.
    pub fn show(&self, name: &str) -> Result<VgpuStatus, Error> {
        one(self.request(&Request::Show { name: name.into() })?)
    }

    /// Creates a vGPU; returns its status.
    pub fn create(&self, spec: VgpuSpec) -> Result<VgpuStatus, Error> {
        one(self.request(&Request::Create { spec })?)
    }

    /// Changes a vGPU; returns its status.
    pub fn set(&self, name: &str, change: Change) -> Result<VgpuStatus, Error> {
        one(self.request(&Request::Set { name: name.into(), change })?)
    }

    /// Suspends (`true`) or resumes a vGPU.
    pub fn suspend(&self, name: &str, suspended: bool) -> Result<VgpuStatus, Error> {
        let name = name.to_string();
        let request = if suspended { Request::Suspend { name } } else { Request::Resume { name, pids: Vec::new() } };
        one(self.request(&request)?)
    }

    /// Snapshots vGPU `name`: suspends it and checkpoints every process of it (their device memory goes to
    /// host memory); with `pids`, checkpoints only those processes of it. Returns its status after.
    pub fn snapshot(&self, name: &str, pids: &[u32]) -> Result<VgpuStatus, Error> {
        one(self.request(&Request::Snapshot { name: name.into(), pids: pids.to_vec() })?)
    }

    /// Resumes vGPU `name`: restores its checkpointed processes' memory (only `pids`' when given) and, for
    /// the whole vGPU, lets its launches continue. Returns its status after.
    pub fn resume(&self, name: &str, pids: &[u32]) -> Result<VgpuStatus, Error> {
        one(self.request(&Request::Resume { name: name.into(), pids: pids.to_vec() })?)
    }

    /// Removes a vGPU.
    pub fn remove(&self, name: &str) -> Result<(), Error> {
        self.request(&Request::Rm { name: name.into() }).map(drop)
    }

    /// Has a soft vGPU's processes defragment (or, with `swap_out`, swap out) and waits for them.
    pub fn page(&self, name: &str, swap_out: bool) -> Result<(PagerReport, Option<VgpuStatus>), Error> {
        let name = name.to_string();
        let reply = self.request(&if swap_out { Request::SwapOut { name } } else { Request::Defrag { name } })?;
        let report = reply.pager.ok_or_else(|| Error::new(ErrorCode::BadReply, "the daemon sent no pager report"))?;
        Ok((report, reply.vgpus.into_iter().next()))
    }

    /// The monitoring figures of every vGPU and device, or of vGPU `name` and its device.
    pub fn stats(&self, name: Option<&str>) -> Result<Stats, Error> {
        let reply = self.request(&Request::Stats { name: name.map(str::to_string) })?;
        reply.stats.ok_or_else(|| Error::new(ErrorCode::BadReply, "the daemon sent no figures"))
    }

    /// Every GPU of the host for virtual machines and the mode it is in.
    pub fn devices(&self) -> Result<Vec<Gpu>, Error> {
        let reply = self.request(&Request::Devices)?;
        reply.gpus.ok_or_else(|| Error::new(ErrorCode::BadReply, "the daemon sent no device list"))
    }

    /// Binds the IOMMU group of the GPU at `address` to `vfio-pci` (`bind`) or gives it back (`!bind`).
    pub fn vfio(&self, address: &str, bind: bool) -> Result<BindReport, Error> {
        let address = address.to_string();
        let request = if bind { Request::BindVfio { address } } else { Request::UnbindVfio { address } };
        self.request(&request)?.bind.ok_or_else(|| Error::new(ErrorCode::BadReply, "the daemon sent no bind report"))
    }

    /// Every mdev type the host's devices offer.
    pub fn mdev_types(&self) -> Result<Vec<MdevType>, Error> {
        let reply = self.request(&Request::MdevTypes)?;
        reply.mdev_types.ok_or_else(|| Error::new(ErrorCode::BadReply, "the daemon sent no mdev types"))
    }

    /// Every mdev.
    pub fn mdev_list(&self) -> Result<Vec<Mdev>, Error> {
        self.request(&Request::MdevList)?
            .mdevs
            .ok_or_else(|| Error::new(ErrorCode::BadReply, "the daemon sent no mdevs"))
    }

    /// Creates an mdev of type `type_id` on `parent` (with `uuid`, or a random one); returns it.
    pub fn mdev_create(&self, parent: &str, type_id: &str, uuid: Option<&str>) -> Result<Mdev, Error> {
        let request =
            Request::MdevCreate { parent: parent.into(), type_id: type_id.into(), uuid: uuid.map(str::to_string) };
        let reply = self.request(&request)?;
        reply
            .mdevs
            .and_then(|m| m.into_iter().next())
            .ok_or_else(|| Error::new(ErrorCode::BadReply, "the daemon named no mdev"))
    }

    /// Removes the mdev `uuid`.
    pub fn mdev_remove(&self, uuid: &str) -> Result<(), Error> {
        self.request(&Request::MdevRm { uuid: uuid.into() }).map(drop)
    }

    /// Reconciles the host's passthrough state with Tessera's records; returns what was done.
    pub fn reconcile(&self) -> Result<ReconcileReport, Error> {
        let reply = self.request(&Request::Reconcile)?;
        reply.reconcile.ok_or_else(|| Error::new(ErrorCode::BadReply, "the daemon sent no reconcile report"))
    }

    /// Waits until a daemon answers (one just started), for at most `timeout`. `starting` is asked
    /// between attempts and ends the wait with its error (the daemon died, the user gave up).
    pub fn wait_until_ready(
        &self,
        timeout: Duration,
        mut starting: impl FnMut() -> Result<(), Error>,
    ) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match self.request(&Request::Version) {
                Ok(_) => return Ok(()),
                // A daemon of another version answered: waiting longer changes nothing.
                Err(e) if e.code == ErrorCode::UnsupportedVersion => return Err(e),
                Err(e) => e,
            };
            starting()?;
            if Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorCode::Timeout,
                    format!("the daemon did not answer within {} s: {last}", timeout.as_secs()),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The one vGPU a reply concerns.
fn one(reply: Reply) -> Result<VgpuStatus, Error> {
    reply.vgpus.into_iter().next().ok_or_else(|| Error::new(ErrorCode::BadReply, "the daemon named no vGPU"))
}
