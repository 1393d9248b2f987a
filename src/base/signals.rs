//! Signal names as the settings take them (INSTRFN_DUMP_SIGNAL, INSTRFN_SNAPSHOT_SIGNAL, and
//! `instrfn record --snapshot-signal`): one file for the runtime and the `instrfn` command
//! (cli/src/record.rs includes it), so a name means the same in both. Pure `core` and libc's
//! numbers: nothing else of the crate.

/// The signal `s` names: a name with or without `SIG` (any case), or a number. None for an
/// unknown name, and for signals the runtime or a crash needs: KILL, STOP, PROF (the pc
/// sampler), the fault signals, ABRT, SYS and CHLD.
pub fn parse_signal(s: &str) -> Option<i32> {
    const NAMES: [(&str, i32); 9] = [
        ("HUP", libc::SIGHUP),
        ("INT", libc::SIGINT),
        ("QUIT", libc::SIGQUIT),
        ("USR1", libc::SIGUSR1),
        ("USR2", libc::SIGUSR2),
        ("ALRM", libc::SIGALRM),
        ("TERM", libc::SIGTERM),
        ("WINCH", libc::SIGWINCH),
        ("URG", libc::SIGURG),
    ];
    const FORBIDDEN: [i32; 11] = [
        libc::SIGKILL,
        libc::SIGSTOP,
        libc::SIGPROF,
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGTRAP,
        libc::SIGABRT,
        libc::SIGSYS,
        libc::SIGCHLD,
    ];
    let s = s.trim();
    let sig = if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse::<i32>().ok()?
    } else {
        let name = s.strip_prefix("SIG").unwrap_or(s);
        NAMES.iter().find(|(n, _)| name.eq_ignore_ascii_case(n))?.1
    };
    (sig >= 1 && sig <= libc::SIGRTMAX() && !FORBIDDEN.contains(&sig)).then_some(sig)
}
