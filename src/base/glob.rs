//! Name patterns: `*` any run of bytes, `?` any one byte; a pattern without wildcards matches
//! as a substring. One definition for the runtime (INSTRFN_FILTER and INSTRFN_EXCLUDE choose
//! the XRay sleds to patch) and the `instrfn` command (`--filter`, `--exclude`:
//! cli/src/filter.rs includes this file), so a pattern means the same in both.
//! Pure `core`: no allocation, nothing else of the crate.

/// Whether pattern `p` matches `s`.
pub fn matches(p: &[u8], s: &[u8]) -> bool {
    if !p.iter().any(|&b| b == b'*' || b == b'?') {
        return s.windows(p.len()).any(|w| w == p);
    }
    // Iterative wildcard matching with backtracking to the last `*`.
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}
