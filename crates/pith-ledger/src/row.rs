//! A record parsed into its ledger row, in two parts: the core row (`core_row`: a skim of the
//! body and the answer's usage), written first, and its derivations (`derivations`: the
//! prompt's fingerprints and the history turn, the prompt read once), written after.
//! Everything costly the ledger does, on a writer thread, never on the request path.

use pith_store::history::Turn;
use pith_store::ledger::{
    self as store, Derivation, RequestOutcome, Row, Transform, TransformResult,
};
use pith_wire::fingerprint::Fingerprint;
use pith_wire::{Wire, encoding, prompt, request, usage};

use super::record::{ProviderCount, Record, Report, ReportResult};
use crate::history::Labels;

/// The fact of a stage that answered the request itself: the ledger prices such a request as
/// the request it saved.
pub(crate) use pith_transform::pins::ANSWERED_FACT;

/// Largest decoded response body parsed for usage.
const MAX_DECODED: u64 = 64 << 20;

/// Parse a record into a ledger row with its derivations, and the conversation turn it holds
/// when history is recorded, in one go (tests; the writers take [`core_row`] and
/// [`derivations`] apart).
#[cfg(test)]
pub(super) fn to_row(r: Record, history: Option<&Labels>) -> (Row, Option<Turn>) {
    let mut row = core_row(&r);
    let (derivation, turn) = derivations(&r, history);
    row.fingerprint = derivation.fingerprint;
    row.client_fingerprint = derivation.client_fingerprint;
    row.derivations_pending = false;
    (row, turn)
}

/// Keep the facts the row reads from the conversation (model, session, anatomy, so the
/// saving of a turn pith answered is priced on the conversation), not the conversation.
/// For a WebSocket turn pith answers itself: a frame of a few hundred bytes continues a
/// conversation the socket holds (up to 16 MiB), and kept whole it went to the spool at
/// every such turn with no call upstream (100 pin frames wrote 1.58 GB). So what the
/// turn spools is its frame and these facts. The row has no derivations: no
/// provider's cache saw the prompt, so its fingerprint is paired with nothing, and the
/// turn reaches history with the conversation of the socket's next turn that goes up (a
/// pin turn that is the socket's last has its row, and no history turn).
pub fn keep_conversation_facts(r: &mut Record) {
    let Some(conversation) = r.conversation_body.take() else {
        return;
    };
    r.prompt_facts = Some(facts_of(r, &conversation));
    let size = conversation.len();
    drop(conversation);
    pith_alloc::release::freed(size);
}

/// Whether a record's row has derivations to wait for: a request on one of the three wires
/// (other than `count_tokens`) has a prompt to fingerprint and maybe a turn to record, unless
/// the record kept only its prompt's facts ([`keep_conversation_facts`]).
pub(super) fn has_derivations(r: &Record) -> bool {
    r.wire.is_some() && !r.path.ends_with("/count_tokens") && r.prompt_facts.is_none()
}

/// The facts of `prompt`, the prompt of `r`, as its row reads them: the session is looked for
/// in the body only when no header named it.
pub(super) fn facts_of(r: &Record, prompt: &[u8]) -> request::RequestFacts {
    let session_need = match r.header_session {
        Some(_) => request::SessionNeed::Known,
        None => request::SessionNeed::FromBody,
    };
    r.wire
        .map(|w| request::request_facts(w, prompt, session_need))
        .unwrap_or_default()
}

/// The session a record belongs to: its header's, else its body's (`metadata.user_id`, else a
/// hash of the first user message); and the request's facts read on the way.
fn session_and_facts(r: &Record) -> (Option<String>, request::RequestFacts) {
    // A WebSocket create's facts are its conversation's: the prompt the provider sees (read
    // when pith answered the turn itself, the conversation not kept).
    let mut facts = match &r.prompt_facts {
        Some(facts) => facts.clone(),
        None => facts_of(r, &prompt_of(r)),
    };
    let session = r
        .header_session
        .clone()
        .or(facts.metadata_session.take())
        .or(facts.first_user_hash.take());
    (session, facts)
}

/// The prompt a record holds: a socket's conversation; the client's body decoded, when it came
/// compressed (decoded here, on a writer, up to [`MAX_DECODED`]: the spool keeps the client's
/// bytes, never what they decode to); else the client's body. A body that does not decode is
/// read as it came (and found unreadable), as the request path left it.
fn prompt_of(r: &Record) -> std::borrow::Cow<'_, [u8]> {
    if let Some(conversation) = &r.conversation_body {
        return std::borrow::Cow::Borrowed(conversation);
    }
    match &r.request_encoding {
        Some(enc) => {
            match encoding::decode_within(enc, &r.request_body, MAX_DECODED, &mut |_| true) {
                Ok(decoded) => std::borrow::Cow::Owned(decoded),
                Err(_) => std::borrow::Cow::Borrowed(&r.request_body),
            }
        }
        None => std::borrow::Cow::Borrowed(&r.request_body),
    }
}

/// A record's core row: what the ledger shows as soon as it can be written (time, wire, model,
/// usage, timings, outcome, transforms and their savings), from a skim of the request and the
/// response's usage. Its derivations (the prompt's fingerprints, with the bust pairing they
/// decide, and the history turn) need a parse of the whole body and come after
/// ([`derivations`]); `derivations_pending` says whether any will. Runs on a writer thread.
pub(super) fn core_row(r: &Record) -> Row {
    let (session, facts) = session_and_facts(r);
    let mut anatomy = facts.anatomy;
    if r.wire.is_none() {
        anatomy.other = r.request_body.len() as u64;
    }
    let body = response_body(r);
    let response = response_facts(r, body.as_deref());
    let savings = match (r.wire, response.usage) {
        (Some(wire), Some(usage)) => savings(wire, &anatomy, &usage, &r.transforms),
        (Some(_), None) if r.outcome == RequestOutcome::Local => {
            answered_locally(&anatomy, &r.transforms)
        }
        _ => Vec::new(),
    };
    let mut outcome = r.outcome;
    let mut error = r.error.clone();
    if let Some(e) = &response.stream_error {
        outcome = RequestOutcome::StreamError;
        error = Some(e.clone());
    }
    Row {
        ts_ms: r.ts_ms,
        client: capped(r.client.clone()),
        session: session.map(capped),
        wire: r.wire.map(|w| w.as_str().to_owned()),
        provider: r
            .provider
            .map(|p| p.as_str().to_owned())
            .unwrap_or_default(),
        model: facts.model.or(response.model).map(capped),
        method: r.method.clone(),
        path: r.path.clone(),
        status: r.status,
        outcome,
        error,
        bytes_client: r.request_body.len() as u64,
        bytes_upstream: r.bytes_upstream,
        bytes_response: r.response_bytes,
        tools_bytes: anatomy.tools,
        system_bytes: anatomy.system,
        messages_bytes: anatomy.messages,
        other_bytes: anatomy.other,
        usage: response.usage,
        ttfb_ms: r.ttfb_ms,
        total_ms: r.total_ms,
        transforms: r.transforms.iter().map(transform_entry).collect(),
        fingerprint: None,
        client_fingerprint: None,
        savings,
        account: Some(r.account.clone()),
        arrival_us: Some(r.arrival_us),
        // The sink names it (one proxy, one name).
        instance: None,
        derivations_pending: has_derivations(r),
        provider_count_outcome: r.provider_count.map(|c| c.as_str().to_owned()),
        provider_count_tokens: r.provider_count.and_then(ProviderCount::tokens),
    }
}

/// The derivations of a record's core row: the prompt's fingerprints (as sent, and as the
/// client sent it when a stage changed it), and the conversation turn it holds when history is
/// recorded, the prompt read once for both. Runs on a writer thread, after the core row.
pub(super) fn derivations(r: &Record, history: Option<&Labels>) -> (Derivation, Option<Turn>) {
    let mut derivation = Derivation {
        arrival_us: r.arrival_us,
        ..Derivation::default()
    };
    let Some(wire) = r.wire.filter(|_| has_derivations(r)) else {
        return (derivation, None);
    };
    // A WebSocket create: the prompt is the conversation, not the frame.
    let prompt = prompt_of(r);
    let read = prompt::derive(wire, &prompt, history.is_some());
    let asked = read.fingerprint.as_ref().map(Fingerprint::to_bytes);
    match &r.upstream_body {
        // A stage changed what was sent: its fingerprint too. Deferral's edit (the tools
        // alone) takes the client's conversation segments as they are; any other, a parse
        // of its own.
        Some(sent) => {
            let spliced = (read.fingerprint.as_ref())
                .filter(|_| r.conversation_body.is_none())
                .and_then(|client| client.with_tools_of(&prompt, sent));
            let sent = spliced.or_else(|| Fingerprint::of(wire, sent));
            derivation.fingerprint = sent.map(|f| f.to_bytes());
            derivation.client_fingerprint = asked;
        }
        None => derivation.fingerprint = asked,
    }
    let turn = history.and_then(|h| {
        // The header's session needs no read of the body (the core row's skim is not kept).
        let session = match &r.header_session {
            Some(session) => Some(session.clone()),
            None => session_and_facts(r).0,
        };
        let body = response_body(r);
        h.turn(r, session.as_deref(), read.messages, body.as_deref())
    });
    (derivation, turn)
}

/// What each stage's edits are estimated to have saved on this request, by the rate the
/// characters they kept out (less those they added) would have been billed at: the rate the
/// real request paid at the place in the prompt where they sit (a prefix read from the cache
/// is priced as a read, one written as a write). Places come from the client body's anatomy
/// in the provider's prompt order, less what the stages kept out and plus what they added (so
/// the bytes stand for what was billed), scaled to the billed prompt; tokens are
/// [`pith_transform::estimated_tokens`]. Negative when a stage added more than it kept out.
fn savings(
    wire: Wire,
    anatomy: &request::Anatomy,
    usage: &usage::Usage,
    reports: &[Report],
) -> Vec<store::Saving> {
    use pith_transform::{FactKind, Site};
    let (mut kept, mut added) = (0u64, 0u64);
    for report in reports {
        if let ReportResult::Applied(facts) = &report.result {
            for f in facts {
                match f.kind {
                    FactKind::CharsKeptOut => kept += f.value,
                    FactKind::CharsAdded => added += f.value,
                    _ => {}
                }
            }
        }
    }
    // Defer keeps its characters out of the tools, which come before the system prompt only on
    // Responses' instructions-first order; elsewhere they are at the start and need no fixing.
    let tools_billed = match wire {
        Wire::Responses => anatomy.tools.saturating_sub(kept).saturating_add(added),
        _ => anatomy.tools,
    };
    let prompt_bytes = (anatomy.tools + anatomy.system + anatomy.messages)
        .saturating_sub(kept)
        .saturating_add(added)
        .max(anatomy.system + tools_billed.min(anatomy.tools));
    let before = |site: Site| -> u64 {
        match (wire, site) {
            (_, Site::Tail) => prompt_bytes,
            // Where in the history is not recorded: its start, so a request that read the
            // cache past the system prompt prices what was kept out at the cache-read rate.
            (Wire::Responses, Site::History) => anatomy.system + tools_billed,
            (_, Site::History) => anatomy.tools + anatomy.system,
            (Wire::Responses, Site::System) => 0,
            (Wire::Responses, Site::Tools) => anatomy.system,
            (_, Site::Tools) => 0,
            (_, Site::System) => anatomy.tools,
        }
    };
    let position = |site: Site| -> u64 {
        let total = u128::from(usage.prompt_total());
        match prompt_bytes {
            0 => 0,
            b => u64::try_from(total * u128::from(before(site).min(b)) / u128::from(b))
                .unwrap_or(u64::MAX),
        }
    };
    let mut out: Vec<store::Saving> = Vec::new();
    for report in reports {
        let ReportResult::Applied(facts) = &report.result else {
            continue;
        };
        for f in facts {
            let sign = match f.kind {
                FactKind::CharsKeptOut => 1,
                FactKind::CharsAdded => -1,
                _ => continue,
            };
            let Some(site) = f.site else { continue };
            let chars = usize::try_from(f.value).unwrap_or(usize::MAX);
            let tokens =
                sign * i64::try_from(pith_transform::estimated_tokens(chars)).unwrap_or(i64::MAX);
            let band = usage.band_at(position(site)).as_str();
            match out
                .iter_mut()
                .find(|s| s.stage == report.stage && s.band == band)
            {
                Some(s) => s.tokens += tokens,
                None => out.push(store::Saving {
                    stage: report.stage.to_owned(),
                    band: band.to_owned(),
                    tokens,
                }),
            }
        }
    }
    out
}

/// The longest client, session or model name kept, in bytes: what a person reads in a table.
/// A client or provider can send anything there (a 20,000-character model name was stored and
/// shown whole); longer ones are cut at a character boundary and marked with `…`.
const MAX_NAME: usize = 200;

fn capped(mut name: String) -> String {
    if name.len() > MAX_NAME {
        let mut end = MAX_NAME;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
        name.push('…');
    }
    name
}

/// A request pith answered itself (a turn of only pin commands) saved the whole request the
/// client would have sent: priced at the lowest rate that request could have paid, its whole
/// prompt read from the cache. The output the model would have written, and a tail that was
/// not cached, are left out, so the estimate does not overstate.
fn answered_locally(anatomy: &request::Anatomy, reports: &[Report]) -> Vec<store::Saving> {
    let stage = reports.iter().find_map(|r| match &r.result {
        ReportResult::Applied(facts) if facts.iter().any(|f| f.name == ANSWERED_FACT) => {
            Some(r.stage.clone())
        }
        _ => None,
    });
    let Some(stage) = stage else {
        return Vec::new();
    };
    let chars = anatomy.tools + anatomy.system + anatomy.messages;
    let tokens = pith_transform::estimated_tokens(usize::try_from(chars).unwrap_or(usize::MAX));
    vec![store::Saving {
        stage,
        band: usage::Band::CacheRead.as_str().to_owned(),
        tokens: i64::try_from(tokens).unwrap_or(i64::MAX),
    }]
}

/// A stage's report in the ledger's words.
fn transform_entry(report: &Report) -> Transform {
    let result = match report.result.clone() {
        ReportResult::Applied(facts) => TransformResult::Applied(
            facts
                .into_iter()
                .map(|f| store::Fact {
                    name: f.name,
                    kind: f.kind.as_str().to_owned(),
                    value: f.value,
                })
                .collect(),
        ),
        ReportResult::Unchanged(reason) => TransformResult::Unchanged(reason),
        ReportResult::Failed(error) => TransformResult::Failed(error),
    };
    Transform {
        stage: report.stage.clone(),
        result,
    }
}

/// The response body the tee kept, decoded: for a successful answer on one of the wires that
/// was kept whole.
fn response_body(r: &Record) -> Option<Vec<u8>> {
    r.wire?;
    let ok = r.status.is_some_and(|s| (200..300).contains(&s));
    if !ok || r.response_truncated || r.response_chunks.is_empty() {
        return None;
    }
    let mut body = Vec::with_capacity(usize::try_from(r.response_bytes).unwrap_or(0));
    for c in &r.response_chunks {
        body.extend_from_slice(c);
    }
    if let Some(enc) = &r.content_encoding {
        body = match encoding::decode(enc, body, MAX_DECODED) {
            Ok(b) => b,
            Err(e) => {
                tracing::debug!(error = %e, "cannot decode response for usage");
                return None;
            }
        };
    }
    Some(body)
}

fn response_facts(r: &Record, body: Option<&[u8]>) -> usage::ResponseFacts {
    // count_tokens answers are free estimates, not billed usage.
    let billed = !r.path.ends_with("/count_tokens");
    let (Some(wire), Some(body)) = (r.wire, body.filter(|_| billed)) else {
        return usage::ResponseFacts::default();
    };
    if r.response_is_sse {
        usage::from_sse(wire, body)
    } else {
        usage::from_json(wire, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pith_transform::{Fact, Site, StageReport, StageResult};

    /// Names from outside are kept at most `MAX_NAME` bytes, cut on a character boundary.
    #[test]
    fn long_names_are_cut_where_a_character_ends() {
        assert_eq!(capped("claude-opus".into()), "claude-opus");
        let long = "é".repeat(15_000);
        let cut = capped(long);
        assert!(cut.len() <= MAX_NAME + '…'.len_utf8(), "{}", cut.len());
        assert!(cut.ends_with('…'));
        let record = Record {
            wire: Some(Wire::AnthropicMessages),
            client: "x".repeat(9_000),
            header_session: Some("s".repeat(5_000)),
            request_body: bytes::Bytes::from(format!(
                r#"{{"model":"{}","messages":[]}}"#,
                "m".repeat(20_000)
            )),
            ..Record::default()
        };
        let (row, _) = to_row(record, None);
        for name in [Some(row.client), row.session, row.model] {
            let name = name.unwrap();
            assert!(name.len() <= MAX_NAME + 3, "{}", name.len());
        }
    }

    /// A request a stage changed gets the sent body's fingerprint and the client's: spliced
    /// when only the tools changed (deferral), read whole otherwise, the same either way.
    #[test]
    fn a_changed_requests_fingerprints_are_the_sent_bodys_and_the_clients() {
        let text = concat!(
            r#"{"model":"claude-opus-5-5","#,
            r#""tools":[{"name":"a","input_schema":{}},{"name":"b","input_schema":{}}],"#,
            r#""system":[{"type":"text","text":"you code","cache_control":{"type":"ephemeral"}}],"#,
            r#""messages":[{"role":"user","content":[{"type":"text","text":"hi","#,
            r#""cache_control":{"type":"ephemeral"}}]}]}"#
        );
        let client = text.as_bytes().to_vec();
        let tools_changed = text.replace(r#"{"name":"b","input_schema":{}}"#, r#"{"name":"s"}"#);
        let system_changed = text.replace("you code", "you code well");
        assert!(tools_changed != text && system_changed != text);
        for sent in [tools_changed, system_changed] {
            let record = Record {
                wire: Some(Wire::AnthropicMessages),
                path: "/v1/messages".into(),
                request_body: bytes::Bytes::from(client.clone()),
                upstream_body: Some(bytes::Bytes::from(sent.clone())),
                ..Record::default()
            };
            let (derivation, _) = derivations(&record, None);
            let of =
                |body: &[u8]| Fingerprint::of(Wire::AnthropicMessages, body).map(|f| f.to_bytes());
            assert_eq!(derivation.fingerprint, of(sent.as_bytes()));
            assert_eq!(derivation.client_fingerprint, of(&client));
            assert!(
                derivation.fingerprint.is_some()
                    && derivation.fingerprint != derivation.client_fingerprint
            );
        }
    }

    /// A turn pith answered itself saved its whole prompt, priced as read from the cache; a
    /// local answer no stage claims saves nothing.
    #[test]
    fn a_local_answer_saves_its_prompt_at_the_cache_read_rate() {
        let anatomy = request::Anatomy {
            tools: 40_000,
            system: 10_000,
            messages: 50_000,
            other: 100,
        };
        let pins = [applied(
            "pins",
            vec![Fact::count("answered", 1), Fact::level("pins", 2)],
        )];
        assert_eq!(
            bands(&answered_locally(&anatomy, &pins)),
            [("pins", "cache_read", 25_000)]
        );
        let other = [applied("pins", vec![Fact::level("pins", 2)])];
        assert!(answered_locally(&anatomy, &other).is_empty());
    }

    /// A turn pith answered on a socket keeps its conversation's facts instead of the
    /// conversation: its row reads the same (model, session, anatomy, the saving priced on the
    /// conversation), and has no derivations to wait for.
    #[test]
    fn a_record_keeping_its_conversations_facts_reads_as_its_conversation() {
        let conversation = serde_json::json!({"model": "gpt-5.5", "instructions": "be brief",
            "tools": [{"type": "function", "name": "ls"}], "input": [
                {"type": "message", "role": "user", "content": "x".repeat(40_000)},
                {"type": "message", "role": "user", "content": "@pith pin be concise"}]});
        let whole = Record {
            wire: Some(Wire::Responses),
            method: "WEBSOCKET".into(),
            path: "/v1/responses".into(),
            status: Some(200),
            outcome: RequestOutcome::Local,
            request_body: bytes::Bytes::from_static(br#"{"type":"response.create"}"#),
            conversation_body: Some(bytes::Bytes::from(conversation.to_string())),
            transforms: vec![applied(
                "pins",
                vec![Fact::count(ANSWERED_FACT, 1), Fact::level("pins", 1)],
            )],
            ..Record::default()
        };
        let mut facts = whole.clone();
        keep_conversation_facts(&mut facts);
        assert_eq!(facts.conversation_body, None);
        let mut expected = core_row(&whole);
        assert!(expected.derivations_pending);
        assert!(
            expected
                .session
                .as_deref()
                .is_some_and(|s| s.starts_with("h-"))
        );
        let prompt = expected.tools_bytes + expected.system_bytes + expected.messages_bytes;
        assert!(prompt > 40_000, "{expected:?}");
        let tokens = i64::try_from(prompt.div_ceil(4)).unwrap();
        assert_eq!(bands(&expected.savings), [("pins", "cache_read", tokens)]);
        expected.derivations_pending = false;
        assert_eq!(core_row(&facts), expected);
        let (derivation, turn) = derivations(&facts, None);
        assert_eq!((derivation.fingerprint, turn.is_none()), (None, true));
    }

    fn applied(stage: &'static str, facts: Vec<Fact>) -> Report {
        Report::from(&StageReport {
            stage,
            result: StageResult::Applied(facts),
        })
    }

    fn usage(input: u64, cache_write: u64, cache_write_1h: u64, cache_read: u64) -> usage::Usage {
        usage::Usage {
            input,
            output: 1,
            cache_write,
            cache_write_1h,
            cache_read,
        }
    }

    fn bands(s: &[store::Saving]) -> Vec<(&str, &str, i64)> {
        s.iter()
            .map(|s| (s.stage.as_str(), s.band.as_str(), s.tokens))
            .collect()
    }

    /// Defer's tools sit at the start of an Anthropic prompt: a warm cache prices them as reads,
    /// a cold one as writes of the lifetime the request wrote, none as input; the search tool it
    /// adds is set against them.
    #[test]
    fn kept_out_tools_are_priced_at_the_cache_state_of_the_prompt_start() {
        let anatomy = request::Anatomy {
            tools: 40_000,
            system: 10_000,
            messages: 50_000,
            other: 100,
        };
        let defer = [applied(
            "defer",
            vec![
                Fact::chars_kept_out("chars", 36_000, Site::Tools),
                Fact::chars_added("added", 80, Site::Tools),
            ],
        )];
        let net = 9_000 - 20;
        let warm = savings(
            Wire::AnthropicMessages,
            &anatomy,
            &usage(10, 500, 0, 15_000),
            &defer,
        );
        assert_eq!(bands(&warm), [("defer", "cache_read", net)]);
        let cold = savings(
            Wire::AnthropicMessages,
            &anatomy,
            &usage(10, 15_000, 0, 0),
            &defer,
        );
        assert_eq!(bands(&cold), [("defer", "cache_write_5m", net)]);
        let hour = savings(
            Wire::AnthropicMessages,
            &anatomy,
            &usage(10, 15_000, 15_000, 0),
            &defer,
        );
        assert_eq!(bands(&hour), [("defer", "cache_write_1h", net)]);
        let none = savings(
            Wire::ChatCompletions,
            &anatomy,
            &usage(15_000, 0, 0, 0),
            &defer,
        );
        assert_eq!(bands(&none), [("defer", "input", net)]);
    }

    /// On Responses the tools come after the instructions: with a cache that covers less than
    /// the instructions, the tools were not cached. The billed bytes leave out what was kept out.
    #[test]
    fn responses_tools_sit_after_the_instructions() {
        let anatomy = request::Anatomy {
            tools: 40_000,
            system: 20_000,
            messages: 4_000,
            other: 0,
        };
        let defer = [applied(
            "defer",
            vec![Fact::chars_kept_out("chars", 36_000, Site::Tools)],
        )];
        // Billed: 20,000 + 4,000 + 4,000 bytes as 7,000 tokens; the tools start at 5,000.
        let cached_through_instructions = savings(
            Wire::Responses,
            &anatomy,
            &usage(1_000, 0, 0, 6_000),
            &defer,
        );
        assert_eq!(
            bands(&cached_through_instructions),
            [("defer", "cache_read", 9_000)]
        );
        let short_cache = savings(
            Wire::Responses,
            &anatomy,
            &usage(3_000, 0, 0, 4_000),
            &defer,
        );
        assert_eq!(bands(&short_cache), [("defer", "input", 9_000)]);
    }

    /// Pins' block lands at the tail: a stage that adds more than it keeps out saves a negative
    /// amount there, summed with nothing else; requests of stages that report no characters,
    /// and stages that left the request alone, save nothing.
    #[test]
    fn an_edit_that_adds_saves_a_negative_amount_at_the_tail() {
        let anatomy = request::Anatomy {
            tools: 1_000,
            system: 1_000,
            messages: 8_000,
            other: 0,
        };
        let reports = [
            applied(
                "pins",
                vec![
                    Fact::level("pins", 2),
                    Fact::chars_added("chars_in", 400, Site::Tail),
                ],
            ),
            applied("search_restore", vec![Fact::count("searches", 1)]),
            Report::from(&StageReport {
                stage: "defer",
                result: StageResult::Unchanged("too_little_to_defer"),
            }),
        ];
        // The tail of a prompt cached through its last message was written.
        let got = savings(
            Wire::AnthropicMessages,
            &anatomy,
            &usage(0, 300, 0, 2_000),
            &reports,
        );
        assert_eq!(bands(&got), [("pins", "cache_write_5m", -100)]);
        let got = savings(
            Wire::AnthropicMessages,
            &anatomy,
            &usage(30, 0, 0, 2_000),
            &reports,
        );
        assert_eq!(bands(&got), [("pins", "input", -100)]);
    }
}
