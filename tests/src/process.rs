//! Child processes that die with the test process.
//!
//! Every child is spawned from one long-lived thread with `PR_SET_PDEATHSIG = SIGKILL`:
//! the kernel delivers that signal when the *thread* that forked the child exits, so
//! spawning from a short-lived test thread would kill the control plane when that test
//! ends. The spawner thread lives as long as the process, so children die exactly when
//! the test process dies — normal exit, panic, Ctrl-C or SIGKILL. On normal exit an
//! `atexit` hook also kills the children and removes temporary directories.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use crate::Error;

type SpawnReply = mpsc::Sender<std::io::Result<Child>>;

static SPAWNER: OnceLock<Mutex<mpsc::Sender<(Command, SpawnReply)>>> = OnceLock::new();
static CLEANUP: Mutex<Cleanup> =
    Mutex::new(Cleanup { pids: Vec::new(), hooks: Vec::new(), dirs: Vec::new() });
static ATEXIT: OnceLock<()> = OnceLock::new();

type Hook = Box<dyn FnOnce() + Send>;

struct Cleanup {
    pids: Vec<i32>,
    hooks: Vec<Hook>,
    dirs: Vec<PathBuf>,
}

/// A running child process whose stdout and stderr go to one log file.
#[derive(Debug)]
pub struct Process {
    name: String,
    child: Mutex<Child>,
    log: PathBuf,
    /// Program, arguments and environment, for [`Process::restart`].
    command: (std::ffi::OsString, Vec<std::ffi::OsString>, Vec<(std::ffi::OsString, std::ffi::OsString)>),
}

impl Process {
    /// Spawns `cmd` (its output appended to `log`) from the spawner thread.
    ///
    /// # Errors
    /// [`Error::Io`] if the log file cannot be created or the binary cannot be started.
    pub fn spawn(name: &str, cmd: Command, log: &Path) -> Result<Process, Error> {
        let command = (
            cmd.get_program().to_owned(),
            cmd.get_args().map(ToOwned::to_owned).collect(),
            cmd.get_envs().filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned()))).collect(),
        );
        let out = File::create(log).map_err(|e| Error::io(format!("creating {}", log.display()), e))?;
        let child = Self::start(name, cmd, out)?;
        Ok(Process { name: name.to_string(), child: Mutex::new(child), log: log.to_path_buf(), command })
    }

    /// Stops the process like [`Self::stop`] (SIGTERM, `grace`, SIGKILL) and starts the same
    /// command again, appending to the same log; the pid changes.
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be started again.
    pub fn restart(&self, grace: std::time::Duration) -> Result<(), Error> {
        self.stop(grace);
        let (program, args, envs) = &self.command;
        let mut cmd = Command::new(program);
        cmd.args(args).envs(envs.iter().map(|(k, v)| (k, v)));
        let out = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.log)
            .map_err(|e| Error::io(format!("opening {}", self.log.display()), e))?;
        let child = Self::start(&self.name, cmd, out)?;
        *self.child.lock().unwrap_or_else(|p| p.into_inner()) = child;
        Ok(())
    }

    fn start(name: &str, mut cmd: Command, out: File) -> Result<Child, Error> {
        let err = out.try_clone().map_err(|e| Error::io("duplicating log handle", e))?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err).process_group(0);
        // The API server and its peers must never reach a proxy for loopback traffic.
        cmd.env("NO_PROXY", crate::NO_PROXY).env("no_proxy", crate::NO_PROXY);
        set_parent_death_signal(&mut cmd);
        let child = spawn_on_spawner_thread(cmd).map_err(|e| Error::io(format!("starting {name}"), e))?;
        install_atexit();
        CLEANUP.lock().unwrap_or_else(|p| p.into_inner()).pids.push(child.id() as i32);
        Ok(child)
    }

    /// The name given at spawn time (`etcd`, `kube-apiserver`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.lock().unwrap_or_else(|p| p.into_inner()).id()
    }

    /// `Some(status)` once the process has exited.
    pub fn exited(&self) -> Option<std::process::ExitStatus> {
        self.child.lock().unwrap_or_else(|p| p.into_inner()).try_wait().ok().flatten()
    }

    /// Path of the log file holding stdout and stderr.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The last `lines` lines of the log that contain any of `needles` (a failure's own
    /// lines out of a log several cases share).
    pub fn log_lines_with(&self, needles: &[&str], lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().filter(|l| needles.iter().any(|n| l.contains(n))).collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Sends `sig` (e.g. `libc::SIGTERM`, `libc::SIGKILL`) without waiting.
    pub fn signal(&self, sig: i32) {
        signal(self.pid() as i32, sig);
    }

    /// Waits up to `timeout` for the process to exit; returns whether it did.
    pub fn wait_exit(&self, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if self.exited().is_some() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        false
    }

    /// Sends SIGTERM, waits up to `grace`, then SIGKILLs. Returns once the process is reaped.
    pub fn stop(&self, grace: std::time::Duration) {
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        let pid = child.id() as i32;
        if child.try_wait().ok().flatten().is_none() {
            signal(pid, libc::SIGTERM);
            let deadline = std::time::Instant::now() + grace;
            while std::time::Instant::now() < deadline {
                if child.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        CLEANUP.lock().unwrap_or_else(|p| p.into_inner()).pids.retain(|p| *p != pid);
    }
}

/// Removes `dir` when the process exits normally (children are killed first).
pub fn remove_at_exit(dir: &Path) {
    install_atexit();
    CLEANUP.lock().unwrap_or_else(|p| p.into_inner()).dirs.push(dir.to_path_buf());
}

/// Runs `hook` when the process exits normally (a test that panicked included), after the
/// children are killed and before temporary directories are removed; hooks run newest first.
pub fn at_exit(hook: Hook) {
    install_atexit();
    CLEANUP.lock().unwrap_or_else(|p| p.into_inner()).hooks.push(hook);
}

/// SIGKILLs `pid`.
pub(crate) fn kill(pid: i32) {
    signal(pid, libc::SIGKILL);
}

#[allow(unsafe_code)]
fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(pid, sig);
    }
}

#[allow(unsafe_code)]
fn set_parent_death_signal(cmd: &mut Command) {
    let parent = std::process::id() as i32;
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
    // functions (prctl, getppid, _exit).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: then nobody would kill us.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

fn spawn_on_spawner_thread(cmd: Command) -> std::io::Result<Child> {
    let tx = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<(Command, SpawnReply)>();
        std::thread::Builder::new()
            .name("qdr-tests-spawner".into())
            .spawn(move || {
                // Lives until the process exits: the Sender is held in a static.
                while let Ok((mut cmd, reply)) = rx.recv() {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("spawning the process-spawner thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    tx.lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((cmd, reply_tx))
        .map_err(|_| std::io::Error::other("spawner thread is gone"))?;
    reply_rx.recv().map_err(|_| std::io::Error::other("spawner thread is gone"))?
}

#[allow(unsafe_code)]
fn install_atexit() {
    ATEXIT.get_or_init(|| {
        extern "C" fn on_exit() {
            // Never block at exit: take what we can without waiting on a poisoned or held lock.
            if let Ok(mut c) = CLEANUP.try_lock() {
                for pid in c.pids.drain(..) {
                    signal(pid, libc::SIGKILL);
                }
                while let Some(hook) = c.hooks.pop() {
                    hook();
                }
                for dir in c.dirs.drain(..) {
                    let _ = std::fs::remove_dir_all(dir);
                }
            }
        }
        // SAFETY: registering a plain extern "C" fn with no captured state.
        unsafe {
            libc::atexit(on_exit);
        }
    });
}
