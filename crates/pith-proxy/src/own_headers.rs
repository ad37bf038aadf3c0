//! The headers pith itself reads on a request and never forwards, and how a secret sent in
//! one is compared.

/// The request header that carries the proxy's access token.
pub const TOKEN_HEADER: &str = "x-pith-token";

/// The header a gateway's client sends its account key in; pith reads it and never forwards
/// it.
pub const ACCOUNT_KEY_HEADER: &str = "pith-account-key";

/// The header a client (or a wrapper) names its agent type with; pith reads it and never
/// forwards it.
pub const AGENT_TYPE_HEADER: &str = "pith-agent-type";

/// `a == b`, reading every byte of both whatever they hold (only the lengths can differ in
/// time, and a secret's length is not the secret).
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}
