//! The process's own identity.

/// The effective uid of this process.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

#[cfg(test)]
mod tests {
    #[test]
    fn euid_is_the_one_the_kernel_reports() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        let effective: u32 = line.split_whitespace().nth(2).unwrap().parse().unwrap();
        assert_eq!(super::euid(), effective);
    }
}
