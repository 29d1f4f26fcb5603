//! Version strings: the display driver and NVML releases that go with the simulated CUDA driver version.

/// `(CUDA driver version, display driver release)` of the releases the simulation knows.
const RELEASES: &[(u32, &str)] = &[(12080, "570.124.06"), (12090, "575.57.08"), (13000, "580.65.06")];

/// The display driver release reported for CUDA driver version `cuda` (`1000 * major + 10 * minor`). Versions
/// not in the table get a synthesized `BRANCH.00.00`, ten branches per CUDA minor version after 13.0.
pub fn driver_version(cuda: u32) -> String {
    match RELEASES.iter().find(|(c, _)| *c == cuda) {
        Some((_, release)) => (*release).to_string(),
        None => format!("{}.00.00", 580 + cuda.saturating_sub(13000) / 10 * 10),
    }
}

/// The NVML library version: the CUDA major version, then the driver release (e.g. `13.580.65.06`).
pub fn nvml_version(cuda: u32) -> String {
    format!("{}.{}", cuda / 1000, driver_version(cuda))
}

#[cfg(test)]
mod tests {
    #[test]
    fn versions_follow_the_cuda_version() {
        assert_eq!(super::nvml_version(13000), "13.580.65.06");
        assert_eq!(super::driver_version(12080), "570.124.06");
        assert_eq!(super::driver_version(13020), "600.00.00");
    }
}
