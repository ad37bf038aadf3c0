//! Edits of a client's settings file that insert pith's entries and change nothing else, and
//! the reverse for `--undo`.
//!
//! JSON and JSONC go through jsonc-parser's CST, which adds the entry and keeps comments,
//! trailing commas, key order and every other entry as they were. Only whitespace may move: an
//! object still written on one line is spread over lines, so the entry can be indented like its
//! neighbours, and the object that takes the entry loses blank lines just inside its braces.
//! TOML goes through `toml_edit`, which keeps comments and layout. Every JSON edit is checked:
//! the result must parse to exactly the old value plus the entry, and keep every non-blank byte.

use std::path::Path;

use anyhow::{Context, anyhow, bail};
use jsonc_parser::cst::{CstInputValue, CstObject, CstObjectProp, CstRootNode};
use pith_clients::{HookEvent, HookSetting, MEMBER_ORDER};
use serde_json::{Value, json};

use crate::client_files::{JSONC, is_toml};

/// What one part of a registration needs to do to its file.
pub enum Plan {
    /// The file already holds it.
    Registered,
    /// The file's new text.
    Write(String),
}

/// What setting one member found.
pub enum Member {
    /// The plan (nothing to change when the member already holds the value).
    Planned(Plan),
    /// The member holds something else, shown; it is left alone.
    Other(Value),
}

/// `value` as the CST writes it, an object's members in [`MEMBER_ORDER`].
fn to_cst(value: &Value) -> CstInputValue {
    match value {
        Value::Null => CstInputValue::Null,
        Value::Bool(b) => CstInputValue::Bool(*b),
        Value::Number(n) => CstInputValue::Number(n.to_string()),
        Value::String(s) => CstInputValue::String(s.clone()),
        Value::Array(items) => CstInputValue::Array(items.iter().map(to_cst).collect()),
        Value::Object(members) => CstInputValue::Object(
            ordered(members)
                .map(|(k, v)| (k.clone(), to_cst(v)))
                .collect(),
        ),
    }
}

/// `members` in [`MEMBER_ORDER`], the rest after them by name.
fn ordered(members: &serde_json::Map<String, Value>) -> impl Iterator<Item = (&String, &Value)> {
    let rank = |k: &str| {
        MEMBER_ORDER
            .iter()
            .position(|o| *o == k)
            .unwrap_or(usize::MAX)
    };
    let mut sorted: Vec<(&String, &Value)> = members.iter().collect();
    sorted.sort_by_key(|(k, _)| (rank(k), k.as_str()));
    sorted.into_iter()
}

/// The member `name` of `object`; the last one if it repeats, as JSON parsers (and so the
/// clients) take the last.
fn member(object: &CstObject, name: &str) -> Option<CstObjectProp> {
    object
        .properties()
        .into_iter()
        .rfind(|p| p.decoded_name().as_deref() == Some(name))
}

/// Whether every non-blank byte of `old` is still in `new`, in order: the edit may add text and
/// move whitespace, never drop or change what was written, comments included, which the value
/// comparison cannot see.
pub fn keeps_text(old: &str, new: &str) -> bool {
    let mut rest = new.bytes().filter(|b| !b.is_ascii_whitespace());
    old.bytes()
        .filter(|b| !b.is_ascii_whitespace())
        .all(|b| rest.any(|n| n == b))
}

/// A settings file's text (JSON, or JSONC by its extension) as its syntax tree, to edit keeping
/// comments, and its value, to read. A blank file, or one of only comments, holds no value yet:
/// it reads as an empty object and gets one after them.
fn parse_json(path: &Path, text: &str, rerun: &str) -> anyhow::Result<(CstRootNode, Value)> {
    let file = path.display();
    let format = if path.extension().is_some_and(|e| e == "jsonc") {
        "JSONC"
    } else {
        "JSON"
    };
    let invalid = |e: jsonc_parser::errors::ParseError| {
        anyhow!("{file} is not valid {format} ({e}); fix that, then run `{rerun}` again")
    };
    let root = CstRootNode::parse(text, &JSONC).map_err(invalid)?;
    let parsed: Value = match root.value() {
        Some(_) => jsonc_parser::parse_to_serde_value(text, &JSONC).map_err(invalid)?,
        None => json!({}),
    };
    if !parsed.is_object() {
        bail!("{file} is not a JSON object; fix it by hand");
    }
    Ok((root, parsed))
}

/// The edited text, once checked to hold exactly `expected` and every byte of `old`.
fn checked(file: &Path, old: &str, root: &CstRootNode, expected: &Value) -> anyhow::Result<String> {
    let new = root.to_string();
    let got: Value = jsonc_parser::parse_to_serde_value(&new, &JSONC)
        .context("internal error: the edit broke the JSON")?;
    if got != *expected || !keeps_text(old, &new) {
        bail!(
            "internal error: the edit of {} would change other content; nothing written",
            file.display()
        );
    }
    // A new file ends with a newline; an old one keeps its last line as it was.
    let ends_open = !old.trim().is_empty() && !old.ends_with('\n');
    Ok(if ends_open || new.ends_with('\n') {
        new
    } else {
        new + "\n"
    })
}

/// The object at `key` under `node`, created (empty) where missing.
fn object_at(mut node: CstObject, key: &[String]) -> anyhow::Result<CstObject> {
    node.ensure_multiline();
    for k in key {
        node = match member(&node, k) {
            Some(prop) => prop
                .object_value()
                .with_context(|| format!("internal error: \"{k}\" is not an object"))?,
            None => {
                node.append(k, CstInputValue::Object(Vec::new()));
                member(&node, k)
                    .and_then(|p| p.object_value())
                    .context("internal error: the new object")?
            }
        };
        node.ensure_multiline();
    }
    Ok(node)
}

/// What is at `key` in `doc`: the value, or nothing; refusing a non-object on the way.
fn existing<'a>(doc: &'a Value, key: &[String], file: &Path) -> anyhow::Result<Option<&'a Value>> {
    let mut at = doc;
    for (i, k) in key.iter().enumerate() {
        match at.get(k) {
            None => return Ok(None),
            Some(v) if i + 1 == key.len() => return Ok(Some(v)),
            Some(v) if v.is_object() => at = v,
            Some(_) => bail!(
                "\"{}\" in {} is not an object; fix it by hand",
                key[..=i].join("."),
                file.display()
            ),
        }
    }
    Ok(None)
}

/// Set the member at `key` (objects on the way created as needed) to `value` in the file's
/// text `old`, keeping everything else as written.
pub fn plan_member(
    path: &Path,
    rerun: &str,
    old: Option<&str>,
    key: &[String],
    value: &Value,
) -> anyhow::Result<Member> {
    if is_toml(path) {
        return plan_toml_member(path, old, key, value);
    }
    let text = old.filter(|t| !t.trim().is_empty()).unwrap_or("");
    let (root, parsed) = parse_json(path, text, rerun)?;
    if let Some(v) = existing(&parsed, key, path)? {
        return Ok(if v == value {
            Member::Planned(Plan::Registered)
        } else {
            Member::Other(v.clone())
        });
    }
    // The objects on the way that exist are walked; the first missing one is added whole,
    // with the rest inside it, so that it takes the file's style (trailing commas) in one go.
    let present = (0..key.len())
        .take_while(|i| {
            existing(&parsed, &key[..=*i], path)
                .ok()
                .flatten()
                .is_some()
        })
        .count();
    let top = root
        .object_value_or_create()
        .with_context(|| format!("{} is not a JSON object; fix it by hand", path.display()))?;
    let node = object_at(top, &key[..present])?;
    let (first, rest) = key[present..]
        .split_first()
        .context("internal error: an empty key")?;
    let added = rest.iter().rev().fold(to_cst(value), |inner, k| {
        CstInputValue::Object(vec![(k.clone(), inner)])
    });
    node.append(first, added);
    let mut expected = parsed;
    let mut slot = &mut expected;
    for k in key {
        slot = &mut slot[k.as_str()];
    }
    *slot = value.clone();
    Ok(Member::Planned(Plan::Write(checked(
        path, text, &root, &expected,
    )?)))
}

/// `value` as a TOML item: an object a table of its own (`[a.b]`), anything else a value.
fn toml_item(value: &Value) -> toml_edit::Item {
    match value {
        Value::Object(members) => {
            let mut table = toml_edit::Table::new();
            for (k, v) in ordered(members) {
                table.insert(k, toml_item(v));
            }
            toml_edit::Item::Table(table)
        }
        other => toml_edit::Item::Value(toml_value(other)),
    }
}

fn toml_value(value: &Value) -> toml_edit::Value {
    match value {
        Value::Bool(b) => (*b).into(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.into(),
            None => n.as_f64().unwrap_or_default().into(),
        },
        Value::Array(items) => toml_edit::Value::Array(items.iter().map(toml_value).collect()),
        Value::Object(members) => {
            let mut t = toml_edit::InlineTable::new();
            for (k, v) in members {
                t.insert(k, toml_value(v));
            }
            toml_edit::Value::InlineTable(t)
        }
        Value::String(s) => s.as_str().into(),
        Value::Null => "".into(),
    }
}

fn parse_toml(path: &Path, old: Option<&str>) -> anyhow::Result<toml_edit::DocumentMut> {
    old.unwrap_or_default()
        .parse()
        .with_context(|| format!("{} is not valid TOML", path.display()))
}

fn toml_text(doc: &toml_edit::DocumentMut) -> String {
    let mut new = doc.to_string();
    if !new.ends_with('\n') {
        new.push('\n');
    }
    new
}

/// The same in a TOML file (Codex's `[mcp_servers.pith]`, `openai_base_url`).
fn plan_toml_member(
    path: &Path,
    old: Option<&str>,
    key: &[String],
    value: &Value,
) -> anyhow::Result<Member> {
    let file = path.display();
    let mut doc = parse_toml(path, old)?;
    let current = crate::client_files::parse(path, old.unwrap_or_default()).unwrap_or_default();
    if let Some(v) = existing(&current, key, path)? {
        return Ok(if v == value {
            Member::Planned(Plan::Registered)
        } else {
            Member::Other(v.clone())
        });
    }
    let (leaf, parents) = key.split_last().context("internal error: an empty key")?;
    let mut table: &mut dyn toml_edit::TableLike = doc.as_table_mut();
    for k in parents {
        table = table
            .entry(k)
            .or_insert_with(|| {
                let mut t = toml_edit::Table::new();
                t.set_implicit(true);
                toml_edit::Item::Table(t)
            })
            .as_table_like_mut()
            .with_context(|| format!("`{k}` in {file} is not a table; fix it by hand"))?;
    }
    table.insert(leaf, toml_item(value));
    Ok(Member::Planned(Plan::Write(toml_text(&doc))))
}

/// Add the hook command under each of its events, keeping everything else as written.
pub fn plan_hooks(hooks: &HookSetting, rerun: &str, old: Option<&str>) -> anyhow::Result<Plan> {
    if is_toml(&hooks.file) {
        plan_toml_hooks(hooks, rerun, old)
    } else {
        plan_json_hooks(hooks, rerun, old)
    }
}

/// The hook group pith adds under one event.
fn hook_group(event: &HookEvent, hooks: &HookSetting) -> Value {
    json!({
        "matcher": event.matcher(),
        "hooks": [{"type": "command", "command": hooks.command, "timeout": hooks.timeout_secs}],
    })
}

/// The commands of every handler under one event of a parsed `hooks` object.
fn commands_under<'a>(hooks: Option<&'a Value>, event: &str) -> Vec<&'a str> {
    hooks
        .and_then(|h| h.get(event))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|g| g.get("hooks").and_then(Value::as_array))
        .flatten()
        .filter_map(|h| h.get("command").and_then(Value::as_str))
        .collect()
}

/// Which events still need the hook in `hooks` (the parsed `hooks` object), refusing a
/// different pith hook command already there.
fn missing_hooks<'a>(
    hooks: Option<&Value>,
    setting: &'a HookSetting,
    rerun: &str,
) -> anyhow::Result<Vec<&'a HookEvent>> {
    let file = setting.file.display();
    let mut missing = Vec::new();
    for event in setting.events {
        let commands = commands_under(hooks, event.event);
        if commands.contains(&setting.command.as_str()) {
            continue;
        }
        if let Some(other) = commands.iter().find(|c| pith_clients::runs_pith(c, "hook")) {
            bail!(
                "{file} already runs a different pith hook on {}: `{other}`\n\
                 pith leaves it alone. Remove that hook, then run `{rerun}` again.",
                event.event
            );
        }
        if hooks
            .and_then(|h| h.get(event.event))
            .is_some_and(|g| !g.is_array())
        {
            bail!(
                "\"{}\" in {file} is not a list; fix it by hand",
                event.event
            );
        }
        missing.push(event);
    }
    Ok(missing)
}

/// Claude Code's and Codex's JSON shape: `{"hooks": {"<event>": [groups]}}`.
fn plan_json_hooks(setting: &HookSetting, rerun: &str, old: Option<&str>) -> anyhow::Result<Plan> {
    let path = &setting.file;
    let text = old.filter(|t| !t.trim().is_empty()).unwrap_or("");
    let (root, parsed) = parse_json(path, text, rerun)?;
    let hooks = parsed.get("hooks");
    if hooks.is_some_and(|h| !h.is_object()) {
        bail!(
            "\"hooks\" in {} is not an object; fix it by hand",
            path.display()
        );
    }
    let missing = missing_hooks(hooks, setting, rerun)?;
    if missing.is_empty() {
        return Ok(Plan::Registered);
    }
    let top = root
        .object_value_or_create()
        .with_context(|| format!("{} is not a JSON object; fix it by hand", path.display()))?;
    let hooks_node = object_at(top, &["hooks".to_owned()])?;
    let mut expected = parsed.clone();
    for event in missing {
        let group = hook_group(event, setting);
        match member(&hooks_node, event.event) {
            Some(prop) => {
                let list = prop
                    .array_value()
                    .context("internal error: the event is not a list")?;
                list.ensure_multiline();
                list.append(to_cst(&group));
            }
            None => {
                hooks_node.append(event.event, CstInputValue::Array(vec![to_cst(&group)]));
            }
        }
        let slot = &mut expected["hooks"][event.event];
        match slot.as_array_mut() {
            Some(list) => list.push(group),
            None => *slot = Value::Array(vec![group]),
        }
    }
    Ok(Plan::Write(checked(path, text, &root, &expected)?))
}

/// Codex's `config.toml`: `[[hooks.<event>]]` tables, each with a matcher and
/// `[[hooks.<event>.hooks]]` handlers.
fn plan_toml_hooks(setting: &HookSetting, rerun: &str, old: Option<&str>) -> anyhow::Result<Plan> {
    use toml_edit::{ArrayOfTables, Item, Table, value};

    let path = &setting.file;
    let file = path.display();
    let mut doc = parse_toml(path, old)?;
    let current = crate::client_files::parse(path, old.unwrap_or_default())
        .with_context(|| format!("`hooks` in {file} cannot be read; fix it by hand"))?;
    let missing = missing_hooks(current.get("hooks"), setting, rerun)?;
    if missing.is_empty() {
        return Ok(Plan::Registered);
    }
    let hooks = doc
        .entry("hooks")
        .or_insert_with(|| {
            let mut t = Table::new();
            t.set_implicit(true);
            Item::Table(t)
        })
        .as_table_like_mut()
        .with_context(|| format!("`hooks` in {file} is not a table; fix it by hand"))?;
    for event in missing {
        let mut handler = Table::new();
        handler.insert("type", value("command"));
        handler.insert("command", value(setting.command.as_str()));
        handler.insert("timeout", value(setting.timeout_secs as i64));
        let mut handlers = ArrayOfTables::new();
        handlers.push(handler);
        let mut group = Table::new();
        group.insert("matcher", value(event.matcher()));
        group.insert("hooks", Item::ArrayOfTables(handlers));
        match hooks.get_mut(event.event) {
            Some(Item::ArrayOfTables(list)) => list.push(group),
            Some(_) => bail!(
                "`hooks.{}` in {file} is not a list of tables; fix it by hand",
                event.event
            ),
            None => {
                let mut list = ArrayOfTables::new();
                list.push(group);
                hooks.insert(event.event, Item::ArrayOfTables(list));
            }
        }
    }
    Ok(Plan::Write(toml_text(&doc)))
}

/// What `--undo` takes out of a file someone changed since setup wrote it: the members pith
/// set, while they still hold what pith wrote, and pith's hook groups.
pub struct Removal<'a> {
    /// Members pith set: key path and the value it wrote.
    pub members: &'a [(Vec<String>, Value)],
    /// The hook command pith added, under any event.
    pub hook_command: Option<&'a str>,
    /// The file as it was before pith: an object pith created and left empty goes too.
    pub before: Option<Value>,
}

impl Removal<'_> {
    /// The objects that may be left empty, deepest first, and were not there before pith.
    fn created_parents(&self) -> Vec<Vec<String>> {
        let mut parents: Vec<Vec<String>> = Vec::new();
        for (key, _) in self.members {
            for n in (1..key.len()).rev() {
                parents.push(key[..n].to_vec());
            }
        }
        if self.hook_command.is_some() {
            parents.push(vec!["hooks".to_owned()]);
        }
        parents.sort_by_key(|p| std::cmp::Reverse(p.len()));
        parents.dedup();
        let before = self.before.clone().unwrap_or_default();
        parents
            .into_iter()
            .filter(|p| pith_clients::lookup(&before, p).is_none())
            .collect()
    }
}

/// `text` without what pith added, the rest as written; `None` when none of it is there.
pub fn remove(path: &Path, text: &str, removal: &Removal<'_>) -> anyhow::Result<Option<String>> {
    let parsed = crate::client_files::parse(path, text).unwrap_or_default();
    if is_toml(path) {
        let mut doc = TomlTree(parse_toml(path, Some(text))?);
        return Ok(remove_from(&mut doc, &parsed, removal));
    }
    let root = CstRootNode::parse(text, &JSONC)
        .map_err(|e| anyhow!("{} is not valid JSON ({e})", path.display()))?;
    Ok(remove_from(&mut JsonTree(root), &parsed, removal))
}

/// A settings file's tree, kept as written, that `--undo` takes pith's entries out of: the one
/// walk in [`remove_from`] serves JSON(C) and TOML alike.
trait SettingsTree {
    /// Take out the member `leaf` of the object at `parents`; whether it was there.
    fn remove_member(&mut self, parents: &[String], leaf: &str) -> bool;
    /// Take out every hook group whose one handler runs `command`, and an event left empty by
    /// that (one that was empty stays); whether any went.
    fn remove_hook_groups(&mut self, command: &str) -> bool;
    /// Take out the object `leaf` of the object at `parents` if it is empty.
    fn remove_if_empty(&mut self, parents: &[String], leaf: &str);
    /// The file's new text.
    fn text(&self) -> String;
}

/// The members pith set (while they still hold what it wrote), its hook groups, then the
/// objects it created and left empty; the new text, or `None` when nothing was there.
fn remove_from(
    tree: &mut impl SettingsTree,
    parsed: &Value,
    removal: &Removal<'_>,
) -> Option<String> {
    let mut changed = false;
    for (key, value) in removal.members {
        if pith_clients::lookup(parsed, key) != Some(value) {
            continue;
        }
        if let Some((leaf, parents)) = key.split_last() {
            changed |= tree.remove_member(parents, leaf);
        }
    }
    if let Some(command) = removal.hook_command {
        changed |= tree.remove_hook_groups(command);
    }
    if !changed {
        return None;
    }
    for parent in removal.created_parents() {
        if let Some((leaf, above)) = parent.split_last() {
            tree.remove_if_empty(above, leaf);
        }
    }
    Some(tree.text())
}

/// A JSON(C) file through jsonc-parser's CST.
struct JsonTree(CstRootNode);

impl JsonTree {
    fn object_at(&self, path: &[String]) -> Option<CstObject> {
        let mut node = self.0.object_value();
        for k in path {
            node = node
                .and_then(|n| member(&n, k))
                .and_then(|p| p.object_value());
        }
        node
    }
}

impl SettingsTree for JsonTree {
    fn remove_member(&mut self, parents: &[String], leaf: &str) -> bool {
        let Some(prop) = self.object_at(parents).and_then(|n| member(&n, leaf)) else {
            return false;
        };
        prop.remove();
        true
    }

    fn remove_hook_groups(&mut self, command: &str) -> bool {
        let mut changed = false;
        let hooks = self.object_at(&["hooks".to_owned()]);
        for event in hooks.iter().flat_map(|h| h.properties()) {
            let Some(list) = event.array_value() else {
                continue;
            };
            let mut took = false;
            for group in list.elements() {
                let runs_it = group
                    .as_object()
                    .and_then(|g| member(&g, "hooks"))
                    .and_then(|p| p.array_value())
                    .is_some_and(|handlers| {
                        let handlers = handlers.elements();
                        handlers.len() == 1
                            && handlers[0]
                                .as_object()
                                .and_then(|h| member(&h, "command"))
                                .and_then(|c| c.value())
                                .and_then(|v| v.as_string_lit())
                                .and_then(|s| s.decoded_value().ok())
                                .as_deref()
                                == Some(command)
                    });
                if runs_it {
                    group.remove();
                    took = true;
                }
            }
            if took && list.elements().is_empty() {
                event.remove();
            }
            changed |= took;
        }
        changed
    }

    fn remove_if_empty(&mut self, parents: &[String], leaf: &str) {
        if let Some(prop) = self.object_at(parents).and_then(|n| member(&n, leaf))
            && prop
                .object_value()
                .is_some_and(|o| o.properties().is_empty())
        {
            prop.remove();
        }
    }

    fn text(&self) -> String {
        self.0.to_string()
    }
}

/// A TOML file through `toml_edit`.
struct TomlTree(toml_edit::DocumentMut);

impl TomlTree {
    fn table_at(&mut self, path: &[String]) -> Option<&mut dyn toml_edit::TableLike> {
        let mut table: Option<&mut dyn toml_edit::TableLike> = Some(self.0.as_table_mut());
        for k in path {
            table = table
                .and_then(|t| t.get_mut(k))
                .and_then(|i| i.as_table_like_mut());
        }
        table
    }
}

impl SettingsTree for TomlTree {
    fn remove_member(&mut self, parents: &[String], leaf: &str) -> bool {
        self.table_at(parents)
            .is_some_and(|t| t.remove(leaf).is_some())
    }

    fn remove_hook_groups(&mut self, command: &str) -> bool {
        let Some(hooks) = self.table_at(&["hooks".to_owned()]) else {
            return false;
        };
        let mut changed = false;
        let events: Vec<String> = hooks.iter().map(|(k, _)| k.to_owned()).collect();
        for event in events {
            let Some(toml_edit::Item::ArrayOfTables(list)) = hooks.get_mut(&event) else {
                continue;
            };
            let before = list.len();
            list.retain(|group| {
                !group
                    .get("hooks")
                    .and_then(|h| h.as_array_of_tables())
                    .is_some_and(|handlers| {
                        handlers.len() == 1
                            && handlers
                                .iter()
                                .all(|h| h.get("command").and_then(|c| c.as_str()) == Some(command))
                    })
            });
            let took = list.len() != before;
            changed |= took;
            if took && list.is_empty() {
                hooks.remove(&event);
            }
        }
        changed
    }

    fn remove_if_empty(&mut self, parents: &[String], leaf: &str) {
        if let Some(t) = self.table_at(parents)
            && t.get(leaf)
                .and_then(|i| i.as_table_like())
                .is_some_and(|inner| inner.is_empty())
        {
            t.remove(leaf);
        }
    }

    fn text(&self) -> String {
        toml_text(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Value {
        json!({"command": "pith", "args": ["mcp"]})
    }

    fn splice(old: &str, section: &str) -> String {
        let key = vec![section.to_owned(), "pith".to_owned()];
        match plan_member(
            Path::new("x.jsonc"),
            "pith setup x",
            Some(old),
            &key,
            &entry(),
        ) {
            Ok(Member::Planned(Plan::Write(new))) => new,
            Ok(_) => panic!("nothing planned"),
            Err(e) => panic!("{e:#}"),
        }
    }

    fn refused(old: &str) -> String {
        let key = vec!["mcp".to_owned(), "pith".to_owned()];
        plan_member(
            Path::new("x.jsonc"),
            "pith setup x",
            Some(old),
            &key,
            &entry(),
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
    }

    #[test]
    fn splices_into_an_existing_section_keeping_its_style() {
        let old = "{\n    \"zeta\": 1,\n    \"mcpServers\": {\n        \"other\": {\"command\": \"x\"}\n    }\n}\n";
        assert_eq!(
            splice(old, "mcpServers"),
            "{\n    \"zeta\": 1,\n    \"mcpServers\": {\n        \"other\": {\"command\": \"x\"},\n        \"pith\": {\n            \"command\": \"pith\",\n            \"args\": [\"mcp\"]\n        }\n    }\n}\n"
        );
        let crlf = "{\r\n  \"mcp\": {\r\n    \"other\": 1\r\n  }\r\n}\r\n";
        assert_eq!(
            splice(crlf, "mcp"),
            "{\r\n  \"mcp\": {\r\n    \"other\": 1,\r\n    \"pith\": {\r\n      \"command\": \"pith\",\r\n      \"args\": [\"mcp\"]\r\n    }\r\n  }\r\n}\r\n"
        );
    }

    #[test]
    fn adds_a_missing_section_and_fills_empty_objects() {
        // One-line objects are spread over lines; their content stays.
        assert_eq!(
            splice("{\"a\": \"}{\\\"\"}", "mcp"),
            "{\n  \"a\": \"}{\\\"\",\n  \"mcp\": {\n    \"pith\": {\n      \"command\": \"pith\",\n      \"args\": [\"mcp\"]\n    }\n  }\n}"
        );
        assert_eq!(
            splice("{\"mcp\": {}}\n", "mcp"),
            "{\n  \"mcp\": {\n    \"pith\": {\n      \"command\": \"pith\",\n      \"args\": [\"mcp\"]\n    }\n  }\n}\n"
        );
        assert_eq!(
            splice("{\n\t\"mcp\": {}\n}", "mcp"),
            "{\n\t\"mcp\": {\n\t\t\"pith\": {\n\t\t\t\"command\": \"pith\",\n\t\t\t\"args\": [\"mcp\"]\n\t\t}\n\t}\n}"
        );
    }

    #[test]
    fn a_blank_file_is_new_and_a_comment_only_file_keeps_its_comment() {
        let fresh = "{\n  \"mcp\": {\n    \"pith\": {\n      \"command\": \"pith\",\n      \"args\": [\"mcp\"]\n    }\n  }\n}\n";
        assert_eq!(splice(" \n", "mcp"), fresh);
        assert_eq!(
            splice("// project settings\n", "mcp"),
            format!("// project settings\n{fresh}")
        );
    }

    #[test]
    fn refuses_what_the_clients_would_not_read() {
        for bad in ["{ not json", "{'a': 1}", "{a: 1}", "{\"a\": 0x10}", "[1]"] {
            let err = refused(bad);
            assert!(err.starts_with("x.jsonc is not "), "{bad}: {err}");
        }
        assert_eq!(
            refused("{\n  \"a\": 1\n  \"b\": 2\n}"),
            "x.jsonc is not valid JSONC (Expected comma on line 2 column 9); fix that, then run \
             `pith setup x` again"
        );
        assert!(refused("{\"mcp\": 3}").contains("\"mcp\" in x.jsonc is not an object"));
    }

    #[test]
    fn keeps_text_sees_a_dropped_comment() {
        assert!(keeps_text("{ /* c */ }", "{\n  /* c */\n  \"a\": 1\n}"));
        assert!(!keeps_text("{ /* c */ }", "{\n  \"a\": 1\n}"));
    }

    #[test]
    fn removal_takes_out_only_what_pith_wrote() {
        let path = Path::new("settings.json");
        let key = vec![
            "projects".to_owned(),
            "/w".to_owned(),
            "mcpServers".to_owned(),
            "pith".to_owned(),
        ];
        let text = "{\n  \"numStartups\": 3,\n  \"projects\": {\n    \"/w\": {\n      \"mcpServers\": {\n        \"pith\": {\"command\": \"pith\", \"args\": [\"mcp\"]},\n        \"other\": {}\n      }\n    }\n  }\n}\n";
        let members = [(key.clone(), entry())];
        let removal = Removal {
            members: &members,
            hook_command: None,
            before: None,
        };
        let out = remove(path, text, &removal).unwrap().unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v,
            json!({"numStartups": 3, "projects": {"/w": {"mcpServers": {"other": {}}}}})
        );
        // An object pith created is gone with its entry once it is left empty.
        let alone = text.replace(",\n        \"other\": {}", "");
        let out = remove(path, &alone, &removal).unwrap().unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v, json!({"numStartups": 3}));
        let before = Some(json!({"projects": {"/w": {}}}));
        let kept = Removal {
            members: &members,
            hook_command: None,
            before,
        };
        let v: Value =
            serde_json::from_str(&remove(path, &alone, &kept).unwrap().unwrap()).unwrap();
        assert_eq!(v, json!({"numStartups": 3, "projects": {"/w": {}}}));
        // A member someone changed since is theirs now.
        let changed = [(key, json!({"command": "other"}))];
        let removal = Removal {
            members: &changed,
            hook_command: None,
            before: None,
        };
        assert!(remove(path, text, &removal).unwrap().is_none());
        // Hook groups running pith's command go, their event with them when it is left empty.
        let hooks = "{\"hooks\": {\"PostToolUse\": [{\"matcher\": \"Bash\", \"hooks\": [{\"type\": \"command\", \"command\": \"pith hook\"}]}, {\"hooks\": [{\"command\": \"mine\"}]}], \"Stop\": [{\"hooks\": [{\"command\": \"pith hook\"}]}]}}";
        let removal = Removal {
            members: &[],
            hook_command: Some("pith hook"),
            before: None,
        };
        let out = remove(path, hooks, &removal).unwrap().unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v,
            json!({"hooks": {"PostToolUse": [{"hooks": [{"command": "mine"}]}]}})
        );
    }

    #[test]
    fn removal_from_toml_takes_out_what_it_takes_out_of_json() {
        let toml = "model = \"o3\"\n\n[mcp_servers.pith]\ncommand = \"pith\"\nargs = [\"mcp\"]\n\n[mcp_servers.other]\ncommand = \"x\"\n\n[[hooks.PostToolUse]]\nmatcher = \"shell\"\n[[hooks.PostToolUse.hooks]]\ntype = \"command\"\ncommand = \"pith hook\"\n\n[[hooks.PostToolUse]]\n[[hooks.PostToolUse.hooks]]\ncommand = \"mine\"\n\n[[hooks.Stop]]\n[[hooks.Stop.hooks]]\ncommand = \"pith hook\"\n";
        let toml_path = Path::new("config.toml");
        let as_json =
            serde_json::to_string(&crate::client_files::parse(toml_path, toml).unwrap()).unwrap();
        let json_path = Path::new("settings.json");
        let key = vec!["mcp_servers".to_owned(), "pith".to_owned()];
        let members = [(key, entry())];
        let removal = Removal {
            members: &members,
            hook_command: Some("pith hook"),
            before: None,
        };
        let from_toml = remove(toml_path, toml, &removal).unwrap().unwrap();
        let from_json = remove(json_path, &as_json, &removal).unwrap().unwrap();
        let from_toml = crate::client_files::parse(toml_path, &from_toml).unwrap();
        let expected = json!({
            "model": "o3",
            "mcp_servers": {"other": {"command": "x"}},
            "hooks": {"PostToolUse": [{"hooks": [{"command": "mine"}]}]}
        });
        assert_eq!(from_toml, expected);
        assert_eq!(serde_json::from_str::<Value>(&from_json).unwrap(), expected);
        // What pith created and left empty goes in both; nothing of pith's there: no change.
        let alone = toml.replace("\n[mcp_servers.other]\ncommand = \"x\"\n", "");
        let out = remove(toml_path, &alone, &removal).unwrap().unwrap();
        let v = crate::client_files::parse(toml_path, &out).unwrap();
        assert_eq!(v["mcp_servers"], Value::Null, "{out}");
        assert!(
            remove(toml_path, "model = \"o3\"\n", &removal)
                .unwrap()
                .is_none()
        );
    }
}
