//! What a long-lived process with its work on one thread keeps resident:
//! the C allocator's arenas, and the pages of its own program.
//!
//! glibc gives each thread that allocates an arena of its own (up to eight
//! per core), and an arena keeps what it once held: each short-lived
//! blocking thread (a `/proc` pass, a log read) can leave one behind.
//!
//! A program's code is mapped from its file, and the kernel maps a large
//! folio (up to 128 KiB on ext4) around every instruction executed: a
//! start-up that runs argument parsing, configuration, SQLite's schema
//! checks and recovery once leaves most of the daemon's 9 MB of code
//! resident, although an idle daemon runs a few functions of it.
//! [`page_out_own_code`] hands those pages back once start-up is over;
//! what runs later is read in again as it first runs (a fault from the
//! page cache, or a read of the file: a first request of a kind pays some
//! tens of microseconds per 64 KiB of code it needs).

use std::io;

/// Caps glibc's malloc at `arenas` arenas (threads beyond share them); true
/// when the allocator took it. Call it before other threads start. Where the
/// C library is not glibc it does nothing and returns false.
pub fn limit_arenas(arenas: u16) -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only sets a tunable of the allocator; a value it
        // does not take is refused with 0, and the call has no other effect.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, i32::from(arenas)) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = arenas;
        false
    }
}

/// The read-only mappings of this process's own program file (code,
/// constants), as `(start, length)`, from `/proc/self/maps`.
fn own_code() -> io::Result<Vec<(usize, usize)>> {
    let exe = std::fs::read_link("/proc/self/exe")?;
    let exe = exe.to_string_lossy();
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    Ok(maps.lines().filter_map(|l| code_range(l, &exe)).collect())
}

/// `(start, length)` of one line of `/proc/<pid>/maps` when it maps `exe`
/// without write permission.
fn code_range(line: &str, exe: &str) -> Option<(usize, usize)> {
    let mut f = line.splitn(6, ' ');
    let range = f.next()?;
    let perms = f.next()?;
    let path = f.nth(3)?.trim_start();
    if path != exe || perms.as_bytes().get(1) != Some(&b'-') {
        return None;
    }
    let (a, b) = range.split_once('-')?;
    let a = usize::from_str_radix(a, 16).ok()?;
    let b = usize::from_str_radix(b, 16).ok()?;
    (b > a).then(|| (a, b - a))
}

/// Asks the kernel to reclaim the resident pages of this program's own code
/// and constants (`MADV_PAGEOUT`), and to read the constants back a page at
/// a time when they are needed again (`MADV_RANDOM`; the kernel reads code
/// around each fault whatever it is told, 64 KiB on Linux 6.18); the bytes
/// of mappings advised. Pages another process maps too are left alone by
/// the kernel.
pub fn page_out_own_code() -> io::Result<usize> {
    let mut advised = 0;
    for (start, len) in own_code()? {
        for advice in [libc::MADV_RANDOM, libc::MADV_PAGEOUT] {
            // SAFETY: the range is a read-only mapping of the program file,
            // as the kernel listed it; these advices only change how its
            // pages are read in and drop them from memory, to be read
            // again from the same file on the next access, so no value the
            // program can see changes.
            let r = unsafe { libc::madvise(start as *mut libc::c_void, len, advice) };
            if r != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        advised += len;
    }
    Ok(advised)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_maps_line_of_the_program_without_write_is_code() {
        let exe = "/usr/bin/oxidepmd";
        let l = "55d0710b5000-55d071963000 r-xp 00232000 fe:00 10043568                   /usr/bin/oxidepmd";
        assert_eq!(code_range(l, exe), Some((0x55d0710b5000, 0x8ae000)));
        let w = "55d0719c0000-55d0719c6000 rw-p 00b0a000 fe:00 10043568   /usr/bin/oxidepmd";
        assert_eq!(code_range(w, exe), None);
        let other = "7fe04fb3e000-7fe04fc94000 r-xp 00028000 fe:00 1 /usr/lib/libc.so.6";
        assert_eq!(code_range(other, exe), None);
        assert_eq!(code_range("garbage", exe), None);
        assert_eq!(code_range("", exe), None);
    }

    #[test]
    fn the_own_code_is_found_and_paged_out_and_still_runs() {
        assert!(!own_code().unwrap().is_empty());
        assert!(page_out_own_code().unwrap() > 0);
        // Code paged out runs again, read back from the file.
        assert_eq!(format!("{}", 6 * 7), "42");
    }

    #[test]
    fn arenas_can_be_limited() {
        assert_eq!(limit_arenas(2), cfg!(target_env = "gnu"));
    }
}
