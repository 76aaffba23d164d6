//! Command names and keys compared as bytes, without allocating: every
//! command of every agent passes here.

/// What follows `agent`'s part of `key` and its `:`, if `key` starts
/// with them in this process's key form (`alice:` or `{alice}:`).
pub fn strip_agent<'k>(key: &'k [u8], agent: &str) -> Option<&'k [u8]> {
    let rest = match oxidepm_lanes::stream_key::key_form() {
        oxidepm_lanes::KeyForm::Plain => key.strip_prefix(agent.as_bytes())?,
        oxidepm_lanes::KeyForm::Tagged => key
            .strip_prefix(b"{")?
            .strip_prefix(agent.as_bytes())?
            .strip_prefix(b"}")?,
    };
    rest.strip_prefix(b":")
}

/// The ASCII upper case of `s` in `buf`; a name longer than `buf` gives an
/// empty slice (no command or subcommand we know is that long).
pub fn upper<'b>(s: &[u8], buf: &'b mut [u8; 16]) -> &'b [u8] {
    if s.len() > buf.len() {
        return &[];
    }
    for (d, c) in buf.iter_mut().zip(s) {
        *d = c.to_ascii_uppercase();
    }
    &buf[..s.len()]
}
