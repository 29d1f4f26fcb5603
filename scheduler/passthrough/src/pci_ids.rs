//! Vendor, device, subsystem and class names from the system's `pci.ids` (the database `lspci` reads):
//! `TESSERA_PCI_IDS` names the file, else the first of the usual places that exists; without one, names
//! are simply absent.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The variable naming the `pci.ids` file.
pub const PATH_VAR: &str = "TESSERA_PCI_IDS";

/// Where distributions install `pci.ids`, in the order they are tried.
pub const DEFAULT_PATHS: [&str; 3] = ["/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids", "/usr/share/pci.ids"];

/// Why the names cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum PciIdsError {
    /// The file [`PATH_VAR`] names cannot be read.
    #[error("{PATH_VAR}={}: cannot read it: {source}", .path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The names `pci.ids` gives.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PciIds {
    vendors: HashMap<u16, String>,
    devices: HashMap<(u16, u16), String>,
    subsystems: HashMap<(u16, u16, u16, u16), String>,
    classes: HashMap<u8, String>,
    subclasses: HashMap<(u8, u8), String>,
}

impl PciIds {
    /// The file [`PATH_VAR`] names (an unreadable one is an error naming it), else the first of
    /// [`DEFAULT_PATHS`] that exists, else no names.
    pub fn load() -> Result<PciIds, PciIdsError> {
        if let Some(path) = std::env::var_os(PATH_VAR) {
            let path = PathBuf::from(path);
            return PciIds::read(&path).map_err(|source| PciIdsError::Unreadable { path, source });
        }
        Ok(DEFAULT_PATHS.iter().find_map(|p| PciIds::read(Path::new(p)).ok()).unwrap_or_default())
    }

    /// The names in file `path`.
    pub fn read(path: &Path) -> std::io::Result<PciIds> {
        // The file is ASCII with a few Latin-1/UTF-8 names: nothing in it is worth failing for.
        Ok(PciIds::parse(&String::from_utf8_lossy(&std::fs::read(path)?)))
    }

    /// Parses `pci.ids` text: vendor lines (`10de  NVIDIA Corporation`), device lines under them (one tab),
    /// subsystem lines under those (two tabs, `vendor device  name`), and class sections (`C 03  Display
    /// controller`, subclasses under them with one tab). Lines it does not understand are skipped.
    pub fn parse(text: &str) -> PciIds {
        let mut ids = PciIds::default();
        // Where the indented lines that follow belong.
        enum Section {
            None,
            Vendor(u16),
            Device(u16, u16),
            Class(u8),
        }
        let mut section = Section::None;
        for line in text.lines() {
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let tabs = line.bytes().take_while(|&b| b == b'\t').count();
            let body = &line[tabs..];
            let (id, name) = match body.split_once(char::is_whitespace) {
                Some((id, name)) => (id, name.trim().to_string()),
                None => continue,
            };
            let hex16 = |s: &str| (s.len() == 4).then(|| u16::from_str_radix(s, 16).ok()).flatten();
            let hex8 = |s: &str| (s.len() == 2).then(|| u8::from_str_radix(s, 16).ok()).flatten();
            match (tabs, &section) {
                (0, _) if id == "C" => {
                    let (class, name) = match name.split_once(char::is_whitespace) {
                        Some((c, n)) => (hex8(c), n.trim().to_string()),
                        None => (None, String::new()),
                    };
                    section = match class {
                        Some(c) => {
                            ids.classes.insert(c, name);
                            Section::Class(c)
                        }
                        None => Section::None,
                    };
                }
                (0, _) => {
                    section = match hex16(id) {
                        Some(v) => {
                            ids.vendors.insert(v, name);
                            Section::Vendor(v)
                        }
                        // Another list (`X` device types, ...): its indented lines are not ours.
                        None => Section::None,
                    };
                }
                (1, Section::Vendor(v) | Section::Device(v, _)) => {
                    let v = *v;
                    if let Some(d) = hex16(id) {
                        ids.devices.insert((v, d), name);
                        section = Section::Device(v, d);
                    }
                }
                (2, Section::Device(v, d)) => {
                    let mut parts = name.splitn(2, char::is_whitespace);
                    if let (Some(sv), Some(sd), Some(n)) = (hex16(id), parts.next().and_then(hex16), parts.next()) {
                        ids.subsystems.insert((*v, *d, sv, sd), n.trim().to_string());
                    }
                }
                (1, Section::Class(c)) => {
                    if let Some(s) = hex8(id) {
                        ids.subclasses.insert((*c, s), name);
                    }
                }
                _ => {}
            }
        }
        ids
    }

    /// Vendor `vendor`'s name.
    pub fn vendor(&self, vendor: u16) -> Option<&str> {
        self.vendors.get(&vendor).map(String::as_str)
    }

    /// Device `device` of `vendor`'s name.
    pub fn device(&self, vendor: u16, device: u16) -> Option<&str> {
        self.devices.get(&(vendor, device)).map(String::as_str)
    }

    /// The name of subsystem `(sub_vendor, sub_device)` of that device.
    pub fn subsystem(&self, vendor: u16, device: u16, sub_vendor: u16, sub_device: u16) -> Option<&str> {
        self.subsystems.get(&(vendor, device, sub_vendor, sub_device)).map(String::as_str)
    }

    /// The name of class code `class` (`0x030200`): its subclass's, else its class's.
    pub fn class(&self, class: u32) -> Option<&str> {
        let (base, sub) = ((class >> 16) as u8, (class >> 8) as u8);
        self.subclasses.get(&(base, sub)).or_else(|| self.classes.get(&base)).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "# pci.ids sample\n\
        #\tcomment with a tab\n\
        10de  NVIDIA Corporation\n\
        \t1eb8  TU104GL [Tesla T4]\n\
        \t\t10de 12a2  T4 16GB\n\
        \t20b0  GA100 [A100 SXM4 40GB]\n\
        \t10f8  TU104 HD Audio Controller\n\
        1af4  Red Hat, Inc.\n\
        \n\
        C 03  Display controller\n\
        \t00  VGA compatible controller\n\
        \t\t00  VGA controller\n\
        \t02  3D controller\n\
        C 04  Multimedia controller\n\
        \t03  Audio device\n";

    #[test]
    fn vendors_devices_subsystems_and_classes_are_named() {
        let ids = PciIds::parse(SAMPLE);
        assert_eq!(ids.vendor(0x10de), Some("NVIDIA Corporation"));
        assert_eq!(ids.device(0x10de, 0x1eb8), Some("TU104GL [Tesla T4]"));
        assert_eq!(ids.device(0x10de, 0x10f8), Some("TU104 HD Audio Controller"));
        assert_eq!(ids.subsystem(0x10de, 0x1eb8, 0x10de, 0x12a2), Some("T4 16GB"));
        assert_eq!(ids.vendor(0x1af4), Some("Red Hat, Inc."));
        assert_eq!(ids.device(0x1af4, 0x1eb8), None, "devices belong to their vendor");
        assert_eq!(ids.class(0x030200), Some("3D controller"));
        assert_eq!(ids.class(0x030000), Some("VGA compatible controller"));
        assert_eq!(ids.class(0x038000), Some("Display controller"), "unknown subclass: the class's name");
        assert_eq!(ids.class(0x040300), Some("Audio device"));
        assert_eq!(ids.class(0x0c0300), None);
        assert_eq!(ids.vendor(0x8086), None);
    }

    #[test]
    fn garbage_lines_are_skipped_not_fatal() {
        let ids =
            PciIds::parse("zz  bad\n\tqqqq  x\n10de\n\t\t\t1234  deep\nC zz  bad class\n\t03  sub\n10de  NVIDIA\n");
        assert_eq!(ids.vendor(0x10de), Some("NVIDIA"));
        assert_eq!(ids.class(0x030000), None);
    }

    #[test]
    fn a_missing_file_is_an_io_error() {
        assert!(PciIds::read(Path::new("/nonexistent/pci.ids")).is_err());
    }
}
