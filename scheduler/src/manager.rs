//! Carrying out requests: each change is checked against the configuration's rules, made in the region
//! (under its lock), then saved; if saving fails the region is put back. A failed request changes
//! nothing.

use crate::config::{Config, VgpuSpec};
use crate::protocol::{Request, Response, VgpuStatus};
use crate::slots;
use crate::store::Store;
use std::sync::{Mutex, MutexGuard};
use tessera_ffi::region_file::{Locked, RegionFile};

/// The daemon's configuration, region and state file.
pub struct Manager {
    region: &'static RegionFile,
    store: Store,
    devices: u32,
    config: Mutex<Config>,
}

impl Manager {
    /// Loads the saved configuration (checked against a machine with `devices` devices) and makes the
    /// region match it: vGPUs already in the region keep their usage and running processes.
    pub fn start(region: &'static RegionFile, store: Store, devices: u32) -> Result<Manager, String> {
        let config = store.load()?;
        config.check(devices).map_err(|e| format!("state file {}: {e}", store.path().display()))?;
        {
            let locked = region.lock()?;
            locked.reclaim_dead();
            slots::release_unknown(&locked, &config.vgpus);
            for spec in &config.vgpus {
                slots::place(&locked, spec, true)?;
            }
        }
        Ok(Manager { region, store, devices, config: Mutex::new(config) })
    }

    /// The configuration, locked: no request is carried out while the guard lives (used at shutdown).
    pub fn config(&self) -> MutexGuard<'_, Config> {
        self.config.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Carries out one request.
    pub fn handle(&self, request: Request) -> Response {
        match self.carry_out(request) {
            Ok(vgpus) => Response::ok(vgpus),
            Err(e) => Response::error(e),
        }
    }

    fn carry_out(&self, request: Request) -> Result<Vec<VgpuStatus>, String> {
        let mut config = self.config();
        let devices = self.devices;
        match request {
            Request::List => {
                let locked = self.region.lock()?;
                locked.reclaim_dead();
                Ok(config.vgpus.iter().map(|s| slots::status(&locked, s)).collect())
            }
            Request::Show { name } => {
                let spec = config.get(&name)?;
                let locked = self.region.lock()?;
                locked.reclaim_dead();
                Ok(vec![slots::status(&locked, spec)])
            }
            Request::Create { spec } => {
                let next = config.create(spec.clone(), devices)?;
                let name = spec.name.clone();
                self.commit(
                    &mut config,
                    next,
                    &name,
                    |l| slots::place(l, &spec, false).map(drop),
                    |l| slots::remove(l, &spec.name),
                )
            }
            Request::Set { name, change } => {
                let next = config.set(&name, &change, devices)?;
                self.reconfigure(&mut config, next, &name, change.memory.is_some())
            }
            Request::Suspend { name } => {
                let next = config.suspend(&name, true, devices)?;
                self.reconfigure(&mut config, next, &name, false)
            }
            Request::Resume { name } => {
                let next = config.suspend(&name, false, devices)?;
                self.reconfigure(&mut config, next, &name, false)
            }
            Request::Rm { name } => {
                let old = config.get(&name)?.clone();
                let next = config.remove(&name)?;
                self.commit(
                    &mut config,
                    next,
                    &name,
                    |l| slots::remove(l, &name),
                    |l| slots::place(l, &old, true).map(drop),
                )
            }
        }
    }

    /// Writes vGPU `name`'s new spec from `next` into its slot (checking the quota against its usage when
    /// `memory` changed), keeping the old one to put back.
    fn reconfigure(
        &self,
        config: &mut Config,
        next: Config,
        name: &str,
        memory: bool,
    ) -> Result<Vec<VgpuStatus>, String> {
        let old = config.get(name)?.clone();
        let new = next.get(name)?.clone();
        let slot = |l: &Locked| {
            slots::find(l, name).ok_or_else(|| format!("vGPU {name:?} has no slot in region file {}", l.path()))
        };
        self.commit(
            config,
            next,
            name,
            |l| {
                let index = slot(l)?;
                if memory {
                    slots::set_memory(l, index, &new)
                } else {
                    slots::configure(&l.region().vgpus[index], &new);
                    Ok(())
                }
            },
            |l| slot(l).map(|index| slots::configure(&l.region().vgpus[index], &old)),
        )
    }

    /// Makes a change in the region (`apply`), saves `next`, and adopts it; if saving fails, `undo` puts
    /// the region back. Returns the status of vGPU `name` afterwards (nothing once it is removed).
    fn commit(
        &self,
        config: &mut Config,
        next: Config,
        name: &str,
        apply: impl FnOnce(&Locked) -> Result<(), String>,
        undo: impl FnOnce(&Locked) -> Result<(), String>,
    ) -> Result<Vec<VgpuStatus>, String> {
        let locked = self.region.lock()?;
        apply(&locked)?;
        if let Err(e) = self.store.save(&next) {
            if let Err(u) = undo(&locked) {
                eprintln!("tessera daemon: could not undo a change after failing to save it: {u}");
            }
            return Err(e);
        }
        *config = next;
        Ok(config.get(name).map(|s| vec![slots::status(&locked, s)]).unwrap_or_default())
    }

    /// The vGPUs as configured now.
    pub fn specs(&self) -> Vec<VgpuSpec> {
        self.config().vgpus.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Change, Priority};
    use std::sync::atomic::Ordering;
    use tessera_ffi::region::{UNLIMITED, flags};

    struct Fixture {
        dir: std::path::PathBuf,
        region: &'static RegionFile,
    }

    impl Fixture {
        fn new(tag: &str) -> Fixture {
            let dir = std::env::temp_dir().join(format!("tessera-manager-test-{}-{tag}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let region = Box::leak(Box::new(RegionFile::open(dir.join("region").to_str().unwrap()).unwrap()));
            Fixture { dir, region }
        }

        fn manager(&self) -> Manager {
            Manager::start(self.region, Store::open(&self.dir.join("state")).unwrap(), 2).unwrap()
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn ok(m: &Manager, r: Request) -> Vec<VgpuStatus> {
        let resp = m.handle(r.clone());
        assert!(resp.ok, "{r:?}: {:?}", resp.error);
        resp.vgpus
    }

    fn err(m: &Manager, r: Request) -> String {
        let resp = m.handle(r.clone());
        assert!(!resp.ok, "{r:?} should fail");
        resp.error.unwrap()
    }

    fn create(name: &str, share: u32) -> Request {
        Request::Create { spec: VgpuSpec::new(name, 0, 1 << 30, share) }
    }

    #[test]
    fn changes_reach_the_region_and_survive_a_restart() {
        let f = Fixture::new("restart");
        let m = f.manager();
        let st = ok(&m, create("a", 30));
        assert_eq!((st[0].spec.share, st[0].used), (30, 0));
        ok(&m, create("b", 70));
        let change = Change { share: Some(20), priority: Some(Priority::High), ..Change::default() };
        ok(&m, Request::Set { name: "b".into(), change });
        ok(&m, Request::Suspend { name: "a".into() });
        let region = f.region.region();
        let slot = |name: &str| {
            let locked = f.region.lock().unwrap();
            slots::find(&locked, name).unwrap()
        };
        let (a, b) = (&region.vgpus[slot("a")], &region.vgpus[slot("b")]);
        assert_eq!(
            (a.config.limit[0].load(Ordering::Relaxed), a.config.limit[1].load(Ordering::Relaxed)),
            (1 << 30, UNLIMITED)
        );
        assert_eq!(a.config.flags.load(Ordering::Relaxed), flags::MANAGED | flags::SUSPENDED);
        assert_eq!((b.config.share.load(Ordering::Relaxed), b.config.priority.load(Ordering::Relaxed)), (20, 2));
        a.live.used[0].store(4096, Ordering::Relaxed);
        drop(m);
        let m = f.manager();
        let list = ok(&m, Request::List);
        assert_eq!(list.len(), 2);
        assert!(list[0].spec.suspended && list[0].used == 4096, "usage kept: {list:?}");
        assert_eq!((list[1].spec.share, list[1].spec.priority), (20, Priority::High));
        ok(&m, Request::Resume { name: "a".into() });
        assert_eq!(a.config.flags.load(Ordering::Relaxed), flags::MANAGED);
    }

    #[test]
    fn refused_requests_change_nothing() {
        let f = Fixture::new("refused");
        let m = f.manager();
        ok(&m, create("a", 60));
        let before = ok(&m, Request::List);
        assert!(err(&m, create("b", 41)).contains("101%"));
        assert!(err(&m, Request::Show { name: "zz".into() }).contains("no vGPU named \"zz\""));
        let bad_device = Request::Create { spec: VgpuSpec::new("c", 5, 1 << 30, 1) };
        assert!(err(&m, bad_device).contains("device 5 does not exist"));
        // A quota below what the vGPU uses now.
        let locked = f.region.lock().unwrap();
        let index = slots::find(&locked, "a").unwrap();
        drop(locked);
        f.region.region().vgpus[index].live.used[0].store(512 << 20, Ordering::Relaxed);
        let lower = Change { memory: Some(256 << 20), ..Change::default() };
        let e = err(&m, Request::Set { name: "a".into(), change: lower });
        assert!(e.contains("uses 512.0 MiB") && e.contains("cannot be lowered to 256.0 MiB"), "{e}");
        f.region.region().vgpus[index].live.used[0].store(0, Ordering::Relaxed);
        assert_eq!(ok(&m, Request::List), before);
        drop(m);
        assert_eq!(f.manager().specs(), before.iter().map(|s| s.spec.clone()).collect::<Vec<_>>(), "nor on disk");
    }

    #[test]
    fn rm_refuses_while_processes_are_attached() {
        let f = Fixture::new("rm");
        let m = f.manager();
        ok(&m, create("a", 10));
        let attached = tessera_ffi::region_file::attach(f.region.path(), "a", None).unwrap();
        assert_eq!(
            attached.vgpu.config.limit[0].load(Ordering::Relaxed),
            1 << 30,
            "a process adopts the daemon's quota"
        );
        let e = err(&m, Request::Rm { name: "a".into() });
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        assert_eq!(ok(&m, Request::List).len(), 1);
        // Detach (as a process that exits would be reclaimed), then it goes.
        attached.me.pid.store(0, Ordering::Release);
        assert!(ok(&m, Request::Rm { name: "a".into() }).is_empty());
        assert!(ok(&m, Request::List).is_empty());
        assert!(err(&m, Request::Rm { name: "a".into() }).contains("no vGPU named"));
    }
}
