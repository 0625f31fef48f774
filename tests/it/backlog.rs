//! The backlog parser and tick against the real roll-formosa backlog and the
//! edge cases of docs/backlog.md.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use nightshift::backlog::{self, Backlog, BacklogError, DetailKind, Item};
use sha2::{Digest, Sha256};

const ROLL_FORMOSA: &str = include_str!("../data/roll-formosa-NEXT.md");

fn parse(text: &str) -> Backlog {
    backlog::parse(Path::new("NEXT.md"), text)
}

fn titles(b: &Backlog) -> Vec<&str> {
    b.items.iter().map(|i| i.title.as_str()).collect()
}

fn item<'a>(b: &'a Backlog, title_start: &str) -> &'a Item {
    let found: Vec<&Item> = b
        .items
        .iter()
        .filter(|i| i.title.starts_with(title_start))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "exactly one item should start with {title_start:?}: {:?}",
        titles(b)
    );
    found[0]
}

fn problem_lines(b: &Backlog) -> Vec<(usize, String)> {
    b.problems
        .iter()
        .map(|p| (p.line, p.message.clone()))
        .collect()
}

/// Asserts that `b`'s problems stand on `lines` (in order); returns them
/// with their messages.
fn problems_at(b: &Backlog, lines: &[usize]) -> Vec<(usize, String)> {
    let got = problem_lines(b);
    let at: Vec<usize> = got.iter().map(|(l, _)| *l).collect();
    assert_eq!(at, lines, "{got:#?}");
    got
}

// ---- the real backlog -------------------------------------------------------

#[test]
fn roll_formosa_counts_items_open_and_done() {
    let b = parse(ROLL_FORMOSA);
    assert_eq!(b.items.len(), 55);
    assert_eq!(b.open_items().count(), 12);
    assert_eq!(b.items.iter().filter(|i| i.done).count(), 43);
    assert!(b.problems.is_empty(), "{:?}", b.problems);
    assert_eq!(
        b.sha256,
        hex::encode(Sha256::digest(ROLL_FORMOSA.as_bytes()))
    );
}

#[test]
fn roll_formosa_titles_are_verbatim_with_full_width_punctuation_and_notes() {
    let b = parse(ROLL_FORMOSA);
    let first = &b.items[0];
    assert_eq!(
        first.title,
        "加台東 tainan→taitung:終點=三仙台八拱橋(或熱氣球);主題=伯朗大道/釋迦/原民圖騰/海岸"
    );
    assert_eq!(first.line, 20);
    assert!(first.done);
    assert_eq!(
        &ROLL_FORMOSA[first.marker_offset..first.marker_offset + 3],
        "[x]"
    );

    let taichung = item(&b, "加深 taichung 街頭物:");
    assert_eq!(
        taichung.title,
        "加深 taichung 街頭物:目前 44/70 同台北→壓到 ≤37;在地版例=宮原冰淇淋杯/太陽餅/麻芛冰/逢甲攤車/大甲媽遶境旗 (done: 39/70)"
    );
    assert_eq!(taichung.line, 43);
    let round2 = item(&b, "加深 taichung 街頭物 round2");
    assert_eq!(
        round2.title,
        "加深 taichung 街頭物 round2:39→≤33;換掉上輪還留的台北街頭物,改台中在地版 (done: 33/70)"
    );
    assert_eq!(round2.line, 59);

    let open: Vec<&Item> = b.open_items().collect();
    assert_eq!(open[0].title, "加深 chiayi 街頭物 round3:33→≤25");
    assert_eq!(open[0].line, 86);
    assert_eq!(
        &ROLL_FORMOSA[open[0].marker_offset..open[0].marker_offset + 3],
        "[ ]"
    );
    assert_eq!(open[11].title, "加深 taitung 街頭物 round3:26→≤25");
    assert_eq!(open[11].line, 97);
    assert!(b.items.iter().all(|i| i.details.lines.is_empty()));
}

#[test]
fn roll_formosa_deepen_item_has_its_section_and_both_block_quotes_as_context() {
    let b = parse(ROLL_FORMOSA);
    let preamble = [
        "已上線且在地化:台北 / 高雄 / 台中 / 台南。不要重做。",
        "加城市一律照 `docs/ADD-A-CITY.md` 全流程(scaffold → 8 地標 + 13 收藏在地化 →",
        "archetypes t0–t6 換成在地小物別沿用台北 → finale 終點地標 → 補 active.js →",
        "`public/assets/title/skyline-<id>.webp` 天際線剪影)。`npm test` 要綠。",
        "**河也要在地化**:`cityMap.js` 的 `water`(名稱 + centerline + 註解)不可留台北基隆河",
        "—— 換成這座城市的河/運河/溪,避開起點(0,0)與終點。`river-localization.test.js` 會擋。",
        "**結尾(`ending.js`)不要動**:已是共用 `../taiwanEnding.js`,引擎依 active city id 自動",
        "點亮對應燈點。新城市只要 id 有在 `taiwanEnding.js` 的 CITIES 裡就自動正確,別在 pack 裡改它。",
        "**displayName/旁白別用「量體」**(建築術語,台灣口語不這樣講)。chunk 大樓類用口語:",
        "街屋 / 大樓 / 百貨大樓 / 摩天大樓 / 大廟 / 倉庫 等,別寫「XX量體」。",
        "每座的「終點地標 / 主題」是創作錨點,doer 照它發揮、不要照搬別城。",
    ];

    let chiayi = item(&b, "加深 chiayi 街頭物 round3");
    assert_eq!(
        chiayi.section.as_deref(),
        Some("加深 round 3（deepen — 目標 ≤25/70,主攻通用建築+童玩在地化）")
    );
    let mut expected: Vec<&str> = preamble.to_vec();
    expected.extend([
        "round2 把多數城壓到 33。這輪把仍 >25 的城再磨到 ≤25:通用建築(透天厝/商辦/銀行/",
        "玻璃帷幕等)改該城風格、童玩類(彈珠/尪仔標等)換在地小物;真街道通用物(機車/超商/",
        "紅綠燈/公車/加油站/路樹/瓦斯桶等)保留。worst-first。",
    ]);
    assert_eq!(chiayi.context, expected);

    let taichung = item(&b, "加深 taichung 街頭物:");
    assert_eq!(
        taichung.section.as_deref(),
        Some("加深街頭物 backlog（deepen — 既有城 chunk 在地化,目標 check-city ≤37/70 同台北）")
    );
    assert_eq!(taichung.context.len(), preamble.len() + 3);
    assert_eq!(taichung.context[..preamble.len()], preamble);
    assert_eq!(
        taichung.context[preamble.len()],
        "收藏物已全台 ≤3 通用、地標/ext 全在地。這批只動 archetypes/tN.js 街頭小物,"
    );

    // A section without its own block quote: the preamble only.
    let keelung = item(&b, "加深 keelung 街頭物:");
    assert_eq!(
        keelung.section.as_deref(),
        Some("加深補跑（keelung — 兩輪漏列,補到 ≤33）")
    );
    assert_eq!(keelung.context, preamble);
}

#[test]
fn roll_formosa_keys_are_unique_and_follow_the_rule() {
    let b = parse(ROLL_FORMOSA);
    let keys: HashSet<&str> = b.items.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(keys.len(), b.items.len());
    for i in &b.items {
        let section = i
            .section
            .as_deref()
            .unwrap_or("")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let title = i.title.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(
            i.key,
            hex::encode(Sha256::digest(format!("{section}\n{title}")))
        );
        assert_eq!(i.key.len(), 64);
    }
}

#[test]
fn key_ignores_whitespace_changes_but_not_the_section() {
    let a = parse("## Fixes\n\n- [ ] fix: the  login\tbug\n");
    let b = parse("##   Fixes  \n\n* [ ]   fix: the login bug   \n");
    let c = parse("## Other\n\n- [ ] fix: the login bug\n");
    assert_eq!(a.items[0].key, b.items[0].key);
    assert_ne!(a.items[0].key, c.items[0].key);
    // Before any `##` the section is empty.
    let none = parse("- [ ] fix: the login bug\n");
    assert_eq!(none.items[0].section, None);
    assert_eq!(
        none.items[0].key,
        hex::encode(Sha256::digest("\nfix: the login bug"))
    );
}

// ---- markers and layout ------------------------------------------------------

#[test]
fn all_list_markers_and_capital_x() {
    let text = "- [ ] dash\n\n* [x] star\n\n+ [X] plus\n\n1. [ ] one\n\n2) [ ] two paren\n";
    let b = parse(text);
    assert_eq!(titles(&b), ["dash", "star", "plus", "one", "two paren"]);
    assert_eq!(
        b.items.iter().map(|i| i.done).collect::<Vec<_>>(),
        [false, true, true, false, false]
    );
    assert_eq!(
        b.items.iter().map(|i| i.line).collect::<Vec<_>>(),
        [1, 3, 5, 7, 9]
    );
    for i in &b.items {
        let marker = &text[i.marker_offset..i.marker_offset + 3];
        assert!(["[ ]", "[x]", "[X]"].contains(&marker), "{marker:?}");
    }
    assert_eq!(
        b.open_items().map(|i| i.title.as_str()).collect::<Vec<_>>(),
        ["dash", "one", "two paren"]
    );
}

#[test]
fn crlf_titles_details_and_context_carry_no_carriage_return() {
    let text = "> rule one\r\n> rule two\r\n\r\n## Sec\r\n\r\n- [ ] first item  \r\n  accept: it works\r\n  a note\r\n- [x] second\r\n";
    let b = parse(text);
    assert_eq!(titles(&b), ["first item", "second"]);
    let first = &b.items[0];
    assert_eq!(first.line, 6);
    assert_eq!(first.section.as_deref(), Some("Sec"));
    assert_eq!(first.context, ["rule one", "rule two"]);
    assert_eq!(first.details.accept, ["it works"]);
    assert_eq!(first.details.notes, ["a note"]);
    assert_eq!(first.details.lines[0].text, "  accept: it works");
    assert_eq!(first.details.lines[0].line, 7);
    assert_eq!(b.items[1].line, 9);
    for i in &b.items {
        assert!(!i.title.contains('\r'));
        assert!(i.details.lines.iter().all(|l| !l.text.contains('\r')));
        assert!(i.context.iter().all(|l| !l.contains('\r')));
    }
}

#[test]
fn tabs_after_markers_and_in_details() {
    let text = "-\t[ ]\ttabbed title\t\n\taccept:\tdone when green\n\t-\tverify: `make check`\n";
    let b = parse(text);
    assert_eq!(titles(&b), ["tabbed title"]);
    let d = &b.items[0].details;
    assert_eq!(d.accept, ["done when green"]);
    assert_eq!(d.verify, ["make check"]);
    assert!(b.problems.is_empty(), "{:?}", b.problems);
}

#[test]
fn markers_in_code_comments_and_block_quotes_are_not_items() {
    let text = "\
> - [ ] quoted task
> more rules

```md
- [ ] fenced task
```

~~~
* [ ] tilde fenced
~~~

    - [ ] indented code task

<!--
- [ ] commented task
-->

- [ ] the only item
";
    let b = parse(text);
    assert_eq!(titles(&b), ["the only item"]);
    assert_eq!(b.items[0].line, 18);
    // The block quote is still the preamble: context.
    assert_eq!(b.items[0].context, ["- [ ] quoted task", "more rules"]);
}

#[test]
fn nested_tasks_are_details_of_their_parent() {
    let text = "\
- [ ] parent
  - [ ] child one
  - [x] child two
    - [ ] grandchild
  - a plain bullet in the item
    - [ ] a task under it is still a detail
- [x] next
";
    let b = parse(text);
    assert_eq!(titles(&b), ["parent", "next"]);
    let d = &b.items[0].details;
    assert_eq!(
        d.notes,
        [
            "- [ ] child one",
            "- [x] child two",
            "  - [ ] grandchild",
            "- a plain bullet in the item",
            "  - [ ] a task under it is still a detail"
        ]
    );
    assert_eq!(
        d.lines.iter().map(|l| l.line).collect::<Vec<_>>(),
        [2, 3, 4, 5, 6]
    );
    assert!(d.lines.iter().all(|l| l.kind == DetailKind::Note));
    assert_eq!(d.lines[2].text, "    - [ ] grandchild");
    assert!(b.problems.is_empty(), "{:?}", b.problems);
}

/// TODO lists group tasks under plain bullets; those tasks are nested in no
/// task item, so they are items (docs/backlog.md#items: nesting under an item makes a
/// detail), not lines nobody reads.
#[test]
fn tasks_grouped_under_plain_bullets_are_items() {
    let text = "\
## Work

- Frontend
  - [ ] fix the button
    accept: it is blue
  - [x] dark mode

  - [ ] loose one after a blank line
- Backend
  1. [ ] numbered under a plain bullet
     - [ ] its sub-task is a detail
- [ ] a top-level item after the groups
* Deeper
  * Deeper still
    * [ ] three levels down
";
    let b = parse(text);
    assert_eq!(
        titles(&b),
        [
            "fix the button",
            "dark mode",
            "loose one after a blank line",
            "numbered under a plain bullet",
            "a top-level item after the groups",
            "three levels down"
        ]
    );
    assert_eq!(
        b.items.iter().map(|i| i.line).collect::<Vec<_>>(),
        [4, 6, 8, 10, 12, 15]
    );
    assert!(b.items.iter().all(|i| i.section.as_deref() == Some("Work")));
    let fix = item(&b, "fix the button");
    assert_eq!(fix.details.accept, ["it is blue"]);
    assert_eq!(fix.details.lines.len(), 1);
    assert_eq!(
        item(&b, "numbered").details.notes,
        ["- [ ] its sub-task is a detail"]
    );
    assert!(b.problems.is_empty(), "{:?}", b.problems);
    for i in &b.items {
        assert!(["[ ]", "[x]"].contains(&&text[i.marker_offset..i.marker_offset + 3]));
    }
    // sync ticks a grouped item in place.
    let ticked = backlog::tick(text, item(&b, "fix the button"), " (done: #9)").unwrap();
    assert!(ticked.contains("\n  - [x] fix the button (done: #9)\n    accept: it is blue\n"));
}

#[test]
fn empty_file_and_files_without_open_items() {
    let empty = parse("");
    assert!(empty.items.is_empty() && empty.problems.is_empty());
    assert_eq!(
        empty.sha256,
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );

    let prose = parse("# Backlog\n\nNothing planned.\n\n- a plain bullet\n");
    assert!(prose.items.is_empty());

    let all_done = parse("## Done\n\n- [x] one (done: #1)\n- [X] two\n");
    assert_eq!(all_done.items.len(), 2);
    assert_eq!(all_done.open_items().count(), 0);
    assert!(all_done.problems.is_empty());
}

#[test]
fn bom_is_skipped_but_offsets_refer_to_the_file() {
    let text = "\u{feff}- [ ] after a bom\n";
    let b = parse(text);
    assert_eq!(titles(&b), ["after a bom"]);
    assert_eq!(b.items[0].marker_offset, 5);
    assert_eq!(&text[5..8], "[ ]");
    assert_eq!(
        backlog::tick(text, &b.items[0], "").unwrap(),
        "\u{feff}- [x] after a bom\n"
    );
}

// ---- details -----------------------------------------------------------------

#[test]
fn details_are_classified_with_line_numbers() {
    let text = "\
## Work

- [ ] add the export
  accept: the CSV has a header row
  - accept: empty tables export as a header only
  verify: `cargo test -p export`
  * verify: npm test
  scope: src/export/**, tests/export*.rs docs/**
  + scope: `Cargo.toml`
  question: which delimiter?
  rounds: 2
  timeout: 1h30m
  Keep the old API working.
  - see issue #12
- [ ] next item
  timeout: 90s
";
    let b = parse(text);
    assert!(b.problems.is_empty(), "{:?}", b.problems);
    let d = &b.items[0].details;
    assert_eq!(
        d.accept,
        [
            "the CSV has a header row",
            "empty tables export as a header only"
        ]
    );
    assert_eq!(d.verify, ["cargo test -p export", "npm test"]);
    assert_eq!(
        d.scope,
        ["src/export/**", "tests/export*.rs", "docs/**", "Cargo.toml"]
    );
    assert_eq!(d.questions, ["which delimiter?"]);
    assert_eq!(d.rounds, Some((2, 11)));
    assert_eq!(d.timeout, Some((Duration::from_secs(5400), 12)));
    assert_eq!(d.notes, ["Keep the old API working.", "- see issue #12"]);
    let kinds: Vec<(usize, DetailKind)> = d.lines.iter().map(|l| (l.line, l.kind)).collect();
    use DetailKind::*;
    assert_eq!(
        kinds,
        [
            (4, Accept),
            (5, Accept),
            (6, Verify),
            (7, Verify),
            (8, Scope),
            (9, Scope),
            (10, Question),
            (11, Rounds),
            (12, Timeout),
            (13, Note),
            (14, Note)
        ]
    );
    assert_eq!(
        d.lines[1].text,
        "  - accept: empty tables export as a header only"
    );
    assert_eq!(
        b.items[1].details.timeout,
        Some((Duration::from_secs(90), 16))
    );
    assert_eq!(b.items[1].details.lines.len(), 1);
}

#[test]
fn keyword_lines_inside_nested_code_are_notes() {
    let text = "- [ ] item\n\n  ```\n  accept: not a condition\n  ```\n  accept: a real one\n";
    let b = parse(text);
    let d = &b.items[0].details;
    assert_eq!(d.accept, ["a real one"]);
    assert_eq!(d.notes, ["```", "accept: not a condition", "```"]);
}

#[test]
fn continuation_lines_of_the_title_paragraph_are_notes() {
    let b = parse("- [ ] short title\n  that goes on here\n");
    assert_eq!(b.items[0].title, "short title");
    assert_eq!(b.items[0].details.notes, ["that goes on here"]);
}

// ---- problems ----------------------------------------------------------------

#[test]
fn every_problem_kind_has_its_line_and_a_hint() {
    let text = "\
- [ ] item one
  accept:
  verify:
  verify: `cargo test
  scope:  ,
  question:
  rounds: x
  rounds: 0
  timeout: soon
  timeout: 0m
- [ ]
- [ ] item two
  scope: src/[oops
  rounds: 2
  rounds: 3
";
    let b = parse(text);
    let got = problems_at(&b, &[2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15]);
    let msg = |line: usize| {
        got.iter()
            .find(|(l, _)| *l == line)
            .map(|(_, m)| m.as_str())
            .unwrap()
    };
    assert_eq!(
        msg(2),
        "empty `accept:` — write the condition after the colon"
    );
    assert!(msg(3).starts_with("empty `verify:`"), "{}", msg(3));
    assert!(msg(4).contains("unclosed"), "{}", msg(4));
    assert!(msg(5).starts_with("empty `scope:`"), "{}", msg(5));
    assert!(msg(6).starts_with("empty `question:`"), "{}", msg(6));
    assert!(
        msg(7).contains("`rounds: x`") && msg(7).contains("e.g."),
        "{}",
        msg(7)
    );
    assert!(msg(8).contains("`rounds: 0`"), "{}", msg(8));
    assert!(
        msg(9).contains("`timeout: soon`") && msg(9).contains("45m"),
        "{}",
        msg(9)
    );
    assert!(msg(10).contains("`timeout: 0m`"), "{}", msg(10));
    assert!(msg(11).contains("without a title"), "{}", msg(11));
    assert!(msg(13).contains("bad glob"), "{}", msg(13));
    assert!(msg(15).contains("line 14"), "{}", msg(15));
    // Malformed values are not kept.
    let d = &b.items[0].details;
    assert!(
        d.accept.is_empty() && d.verify.is_empty() && d.scope.is_empty() && d.questions.is_empty()
    );
    assert_eq!((d.rounds, d.timeout), (None, None));
    assert_eq!(b.items[2].details.rounds, Some((3, 15)));
    assert_eq!(
        b.problems[0].to_string(),
        "NEXT.md:2: empty `accept:` — write the condition after the colon"
    );
}

#[test]
fn duplicate_open_items_are_a_problem_duplicate_done_items_are_not() {
    let b =
        parse("## A\n\n- [x] same\n- [x] same\n- [ ] again\n- [ ] again\n\n## B\n\n- [ ] again\n");
    assert_eq!(problem_lines(&b).len(), 1);
    assert_eq!(b.problems[0].line, 6);
    assert!(
        b.problems[0].message.contains("line 5"),
        "{}",
        b.problems[0].message
    );
}

// ---- context and sections ------------------------------------------------------

#[test]
fn context_is_preamble_plus_all_quotes_of_the_own_section_only() {
    let text = "\
# Title

> global rule
>
> second paragraph of it

## Alpha ##

> alpha rule

- [ ] a1

> alpha rule between items
lazy continuation

- [ ] a2

Beta
----

> beta rule

- [ ] b1
  > a quote nested in the item is a detail
";
    let b = parse(text);
    let global = ["global rule", "", "second paragraph of it"];
    let with = |extra: &[&str]| {
        global
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    };
    let alpha = with(&[
        "alpha rule",
        "alpha rule between items",
        "lazy continuation",
    ]);
    assert_eq!(item(&b, "a1").context, alpha);
    assert_eq!(item(&b, "a2").context, alpha);
    assert_eq!(item(&b, "a1").section.as_deref(), Some("Alpha"));
    assert_eq!(item(&b, "b1").section.as_deref(), Some("Beta"));
    assert_eq!(item(&b, "b1").context, with(&["beta rule"]));
    assert_eq!(
        item(&b, "b1").details.notes,
        ["> a quote nested in the item is a detail"]
    );
}

#[test]
fn only_level_two_headings_make_sections() {
    let text = "## Section `one`\n\n### Sub\n\n- [ ] item\n\n#### Deeper\n\n- [ ] deep\n";
    let b = parse(text);
    assert_eq!(b.items[0].section.as_deref(), Some("Section `one`"));
    assert_eq!(b.items[1].section.as_deref(), Some("Section `one`"));
}

/// The outline rule: a `#` heading is above `##`, so it closes the `##`
/// section before it; the items and quotes under it belong to no `##`
/// section (their key has an empty section), and that section's rules are
/// not their context.
#[test]
fn a_level_one_heading_closes_the_section_above_it() {
    let text = "\
# Backlog

> global rule

## Now

> now rule

- [ ] now item

# Later

> later rule

- [ ] later item

## Soon

- [ ] soon item
";
    let b = parse(text);
    let now = item(&b, "now item");
    assert_eq!(now.section.as_deref(), Some("Now"));
    assert_eq!(now.context, ["global rule", "now rule"]);
    let later = item(&b, "later item");
    assert_eq!(later.section, None);
    assert_eq!(later.context, ["global rule", "later rule"]);
    assert_eq!(later.key, hex::encode(Sha256::digest("\nlater item")));
    let soon = item(&b, "soon item");
    assert_eq!(soon.section.as_deref(), Some("Soon"));
    assert_eq!(soon.context, ["global rule"]);

    // `#` headings before the first `##` are the preamble's: their quotes are for everyone.
    let b = parse("# Title\n\n> a\n\n# Part\n\n> b\n\n## S\n\n- [ ] x\n");
    assert_eq!(b.items[0].context, ["a", "b"]);
    assert_eq!(b.items[0].section.as_deref(), Some("S"));
}

/// Headings as people write them: setext (`===`/`---`, even over two lines),
/// closing `#`s, emphasis, links and code kept verbatim on one line.
#[test]
fn heading_forms() {
    let text = "\
Project
=======

Bugs and
crashes
--------

- [ ] b

## **Emph**, [a link](http://x) and `code` ###

- [ ] c

##not a heading

- [ ] d
";
    let b = parse(text);
    assert_eq!(item(&b, "b").section.as_deref(), Some("Bugs and crashes"));
    assert_eq!(
        item(&b, "c").section.as_deref(),
        Some("**Emph**, [a link](http://x) and `code`")
    );
    assert_eq!(
        item(&b, "d").section.as_deref(),
        Some("**Emph**, [a link](http://x) and `code`")
    );
    assert!(b.problems.is_empty(), "{:?}", b.problems);
}

// ---- tick ----------------------------------------------------------------------

#[test]
fn tick_changes_only_the_marker_and_the_end_of_the_title_line() {
    let text = "## S\n\n- [ ] one\n- [ ] two\n- [ ] three\n  accept: x\n";
    let b = parse(text);
    let ticked = backlog::tick(text, &b.items[1], " (done: #123)").unwrap();
    assert_eq!(
        ticked,
        "## S\n\n- [ ] one\n- [x] two (done: #123)\n- [ ] three\n  accept: x\n"
    );

    // Ticking the neighbours of the re-read file works on the new offsets too.
    let again = parse(&ticked);
    assert_eq!(
        again
            .open_items()
            .map(|i| i.title.as_str())
            .collect::<Vec<_>>(),
        ["one", "three"]
    );
    assert_eq!(again.items[1].title, "two (done: #123)");
    let both = backlog::tick(&ticked, &again.items[2], " (done: #124)").unwrap();
    let both = backlog::tick(&both, &again.items[0], " (done: #125)").unwrap();
    assert_eq!(
        both,
        "## S\n\n- [x] one (done: #125)\n- [x] two (done: #123)\n- [x] three (done: #124)\n  accept: x\n"
    );
}

#[test]
fn tick_keeps_crlf_trailing_whitespace_and_a_missing_final_newline() {
    let text = "- [ ] first\r\n- [ ] second  \r\n- [ ] last";
    let b = parse(text);
    assert_eq!(
        backlog::tick(text, &b.items[0], " (done: #1)").unwrap(),
        "- [x] first (done: #1)\r\n- [ ] second  \r\n- [ ] last"
    );
    assert_eq!(
        backlog::tick(text, &b.items[1], " (done: #2)").unwrap(),
        "- [ ] first\r\n- [x] second (done: #2)  \r\n- [ ] last"
    );
    assert_eq!(
        backlog::tick(text, &b.items[2], " (done: #3)").unwrap(),
        "- [ ] first\r\n- [ ] second  \r\n- [x] last (done: #3)"
    );
}

#[test]
fn tick_on_the_real_backlog_changes_one_line() {
    let b = parse(ROLL_FORMOSA);
    let first_open = b.open_items().next().unwrap();
    let ticked = backlog::tick(ROLL_FORMOSA, first_open, " (done: #123)").unwrap();
    let before: Vec<&str> = ROLL_FORMOSA.split('\n').collect();
    let after: Vec<&str> = ticked.split('\n').collect();
    assert_eq!(before.len(), after.len());
    let changed: Vec<usize> = (0..before.len())
        .filter(|&i| before[i] != after[i])
        .collect();
    assert_eq!(changed, [first_open.line - 1]);
    assert_eq!(
        after[first_open.line - 1],
        "- [x] 加深 chiayi 街頭物 round3:33→≤25 (done: #123)"
    );
}

#[test]
fn tick_refuses_a_changed_file_a_done_item_and_a_multiline_note() {
    let text = "- [ ] one\n- [x] two\n";
    let b = parse(text);
    match backlog::tick(text, &b.items[1], " (done: #1)") {
        Err(BacklogError::MarkerMismatch { line: 2, found, .. }) => assert_eq!(found, "[x]"),
        other => panic!("expected MarkerMismatch, got {other:?}"),
    }
    let shifted = format!("\n{text}");
    assert!(matches!(
        backlog::tick(&shifted, &b.items[0], ""),
        Err(BacklogError::MarkerMismatch { line: 1, .. })
    ));
    let retitled = "- [ ] uno\n- [x] two\n";
    assert!(matches!(
        backlog::tick(retitled, &b.items[0], ""),
        Err(BacklogError::TitleMismatch { line: 1, .. })
    ));
    assert!(matches!(
        backlog::tick("- [", &b.items[0], ""),
        Err(BacklogError::MarkerMismatch { .. })
    ));
    assert!(matches!(
        backlog::tick(text, &b.items[0], " (done)\n- [ ] injected"),
        Err(BacklogError::NoteHasLineBreak { .. })
    ));
}

// ---- read ----------------------------------------------------------------------

#[test]
fn read_hashes_the_bytes_and_names_the_path_on_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("NEXT.md");
    std::fs::write(&path, ROLL_FORMOSA).unwrap();
    let b = backlog::read(&path).unwrap();
    assert_eq!(b.path, path);
    assert_eq!(b, backlog::parse(&path, ROLL_FORMOSA));

    let missing = dir.path().join("MISSING.md");
    let err = backlog::read(&missing).unwrap_err();
    assert!(matches!(err, BacklogError::Read { .. }));
    assert!(err.to_string().contains("MISSING.md"), "{err}");

    let latin1 = dir.path().join("LATIN1.md");
    std::fs::write(&latin1, b"- [ ] caf\xe9\n").unwrap();
    let err = backlog::read(&latin1).unwrap_err();
    assert!(
        matches!(err, BacklogError::NotUtf8 { offset: 9, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("LATIN1.md"), "{err}");
}

#[test]
fn problems_name_the_given_path() {
    let b = backlog::parse(Path::new("docs/NEXT.md"), "- [ ] x\n  rounds: many\n");
    assert_eq!(b.problems.len(), 1);
    assert!(
        b.problems[0]
            .to_string()
            .starts_with("docs/NEXT.md:2: `rounds: many`"),
        "{}",
        b.problems[0]
    );
}

#[test]
fn hidden_characters_are_problems_with_their_line() {
    let b = nightshift::backlog::parse(
        std::path::Path::new("NEXT.md"),
        "# x\n\n- [ ] fine\n- [ ] a \0 b\n- [ ] evil \u{202e}txt.exe\n",
    );
    let lines: Vec<usize> = b.problems.iter().map(|p| p.line).collect();
    assert_eq!(lines, vec![4, 5], "{:?}", b.problems);
    assert!(b.problems[0].to_string().contains("U+0000"));
    assert!(b.problems[1].to_string().contains("U+202E"));
}

#[test]
fn verify_prose_and_wide_bullets() {
    let b = nightshift::backlog::parse(
        std::path::Path::new("NEXT.md"),
        "- [ ] a\n  - verify: run `make check` first\n- [ ] b\n  -    rounds: 2\n",
    );
    assert_eq!(b.problems.len(), 1, "{:?}", b.problems);
    assert_eq!(b.problems[0].line, 2);
    assert_eq!(
        b.items[1].details.rounds.map(|r| r.0),
        Some(2),
        "`-    rounds: 2` is a detail line"
    );
}

// ---- real-world layouts ----------------------------------------------------------

/// Jekyll/Hugo/Obsidian front matter is metadata: not a setext `##` section
/// (the YAML would become every item's section and key), not context.
#[test]
fn front_matter_is_skipped() {
    let yaml = "---\ntitle: Backlog\ntags: [a, b]\n---\n\n> rule\n\n- [ ] first\n  accept: works\n";
    let b = parse(yaml);
    assert_eq!(titles(&b), ["first"]);
    assert_eq!(b.items[0].section, None);
    assert_eq!(b.items[0].line, 8);
    assert_eq!(b.items[0].context, ["rule"]);
    assert_eq!(b.items[0].key, parse("- [ ] first\n").items[0].key);
    assert!(b.problems.is_empty(), "{:?}", b.problems);

    // `...` closes YAML too; CRLF, a BOM and TOML `+++` work the same way.
    for text in [
        "---\r\nowner: me\r\n...\r\n## S\r\n- [ ] a\r\n",
        "\u{feff}---\nowner: me\n---\n## S\n- [ ] a\n",
        "+++\nowner = \"me\"\n+++\n## S\n- [ ] a\n",
    ] {
        let b = parse(text);
        assert_eq!(titles(&b), ["a"], "{text:?}");
        assert_eq!(b.items[0].section.as_deref(), Some("S"), "{text:?}");
        assert_eq!(&text[b.items[0].marker_offset..][..3], "[ ]");
        assert!(b.problems.is_empty(), "{text:?}: {:?}", b.problems);
    }

    // A rule at the top (blank line after it) or one never closed is not front matter.
    let b = parse("---\n\n- [ ] after a rule\n\n---\n\n- [ ] b\n");
    assert_eq!(titles(&b), ["after a rule", "b"]);
    let b = parse("---\ntitle: never closed\n\n- [ ] a\n");
    assert_eq!(titles(&b), ["a"]);
}

/// What front matter hides is named: an open item and a setting that do nothing there.
#[test]
fn front_matter_hiding_an_item_or_a_detail_is_a_problem() {
    let b = parse(
        "---\ntitle: x\nverify: npm test\n- [ ] hidden item\n- [x] hidden done item\n---\n- [ ] a\n",
    );
    assert_eq!(titles(&b), ["a"]);
    let got = problems_at(&b, &[3, 4]);
    assert!(
        got[0]
            .1
            .contains("`verify:` in the front matter (lines 1–6)"),
        "{}",
        got[0].1
    );
    assert!(
        got[1].1.contains("task item inside the front matter"),
        "{}",
        got[1].1
    );
}

/// Old Mac files end lines with a lone CR; CommonMark reads them as lines, so
/// must titles, line numbers, details and the tick.
#[test]
fn lone_cr_line_endings() {
    let text = "## S\r\r> rule\r\r- [ ] one  \r  accept: a\r  - [ ] sub\r- [ ] two\r";
    let b = parse(text);
    assert_eq!(titles(&b), ["one", "two"]);
    assert_eq!(b.items.iter().map(|i| i.line).collect::<Vec<_>>(), [5, 8]);
    let one = &b.items[0];
    assert_eq!(one.context, ["rule"]);
    assert_eq!(one.details.accept, ["a"]);
    assert_eq!(one.details.notes, ["- [ ] sub"]);
    assert_eq!(one.details.lines[0].line, 6);
    assert_eq!(one.details.lines[0].text, "  accept: a");
    assert!(b.problems.is_empty(), "{:?}", b.problems);
    assert_eq!(
        backlog::tick(text, one, " (done: #1)").unwrap(),
        "## S\r\r> rule\r\r- [x] one (done: #1)  \r  accept: a\r  - [ ] sub\r- [ ] two\r"
    );
    assert_eq!(
        backlog::tick(text, &b.items[1], " (done: #2)").unwrap(),
        "## S\r\r> rule\r\r- [ ] one  \r  accept: a\r  - [ ] sub\r- [x] two (done: #2)\r"
    );
    // Problems name the right line too.
    let b = parse("- [ ] a\r  rounds: x\r");
    assert_eq!(b.problems[0].line, 2);
}

/// Titles are the marker line verbatim: markup, HTML, emoji and reference
/// links whose definitions come later are kept; nothing there is a problem.
#[test]
fn titles_keep_markup_verbatim() {
    let text = "\
- [ ] fix [the link](http://x.y) and `code` and **bold** _em_
- [ ] <b>html</b> title 🚀 emoji   \t
- [ ] trailing backslash\\
- [ ] see [issue][1] and [docs]
- [ ] title with a hard break  
  and more
- [ ] a lazy title
that goes on unindented

[1]: https://example.com/1
[docs]: https://example.com/docs
";
    let b = parse(text);
    assert_eq!(
        titles(&b),
        [
            "fix [the link](http://x.y) and `code` and **bold** _em_",
            "<b>html</b> title 🚀 emoji",
            "trailing backslash\\",
            "see [issue][1] and [docs]",
            "title with a hard break",
            "a lazy title",
        ]
    );
    assert_eq!(
        item(&b, "title with a hard break").details.notes,
        ["and more"]
    );
    assert_eq!(
        item(&b, "a lazy title").details.notes,
        ["that goes on unindented"]
    );
    assert!(b.problems.is_empty(), "{:?}", b.problems);
    let emoji = item(&b, "<b>html</b>");
    assert_eq!(
        backlog::tick(text, emoji, " (done: #5)")
            .unwrap()
            .lines()
            .nth(1),
        Some("- [x] <b>html</b> title 🚀 emoji (done: #5)   \t")
    );
}

/// Loose lists, lists starting at 3, tasks after a plain bullet, inside a
/// `<details>` block whose markdown is separated by blank lines.
#[test]
fn list_layouts() {
    let text = "\
- [ ] loose one

  accept: after a blank line

- [ ] loose two
- a plain bullet first
- [ ] task after the plain bullet

3. [ ] numbered from three
4. [ ] four
   accept: n4

<details>
<summary>Archive</summary>

- [x] old
- [ ] reopened

</details>
";
    let b = parse(text);
    assert_eq!(
        titles(&b),
        [
            "loose one",
            "loose two",
            "task after the plain bullet",
            "numbered from three",
            "four",
            "old",
            "reopened"
        ]
    );
    assert_eq!(item(&b, "loose one").details.accept, ["after a blank line"]);
    assert_eq!(item(&b, "four").details.accept, ["n4"]);
    assert!(b.problems.is_empty(), "{:?}", b.problems);
}

/// Detail lines as people write them: after bullets of any kind, in any
/// case, with a full-width colon, as a bold label, several `accept:` lines.
#[test]
fn detail_line_forms() {
    let text = "\
- [ ] item
  - accept: dash
  * accept: star
  + accept: plus
  1. accept: numbered
  2) accept: numbered paren
  accept: plain
  Accept: capital
  ACCEPT : spaced
  accept：full-width colon
  **accept:** bold label
  **Accept**: bold word
  - __accept__： bold after a bullet
  _accept:_ emphasis
  verify: `cargo test --all`
  scope: `src/**`, `tests/*.rs`
  scope: docs/a.md、docs/b.md；Cargo.toml
  rounds: ３
  timeout: 1 hour 30 min
  Accept criteria: prose, a note
  **acceptance** criteria, a note too
  - [ ] accept: a checklist line is a note
  > accept: a quoted line is a note
";
    let b = parse(text);
    assert!(b.problems.is_empty(), "{:?}", b.problems);
    let d = &b.items[0].details;
    assert_eq!(
        d.accept,
        [
            "dash",
            "star",
            "plus",
            "numbered",
            "numbered paren",
            "plain",
            "capital",
            "spaced",
            "full-width colon",
            "bold label",
            "bold word",
            "bold after a bullet",
            "emphasis"
        ]
    );
    assert_eq!(d.verify, ["cargo test --all"]);
    assert_eq!(
        d.scope,
        [
            "src/**",
            "tests/*.rs",
            "docs/a.md",
            "docs/b.md",
            "Cargo.toml"
        ]
    );
    assert_eq!(d.rounds, Some((3, 18)));
    assert_eq!(d.timeout, Some((Duration::from_secs(5400), 19)));
    assert_eq!(
        d.notes,
        [
            "Accept criteria: prose, a note",
            "**acceptance** criteria, a note too",
            "- [ ] accept: a checklist line is a note",
            "> accept: a quoted line is a note"
        ]
    );
}

#[test]
fn rounds_and_timeout_values() {
    let text = "\
- [ ] a
  rounds: 3 
  timeout: 30m
- [ ] b
  rounds: three
  timeout: 90
- [ ] c
  rounds: 0
  timeout: abc
- [ ] d
  timeout: 45分鐘
  rounds: 99999999999
- [ ] e
  timeout: 0h
";
    let b = parse(text);
    assert_eq!(item(&b, "a").details.rounds, Some((3, 2)));
    assert_eq!(
        item(&b, "a").details.timeout,
        Some((Duration::from_secs(1800), 3))
    );
    assert_eq!(
        item(&b, "d").details.timeout,
        Some((Duration::from_secs(2700), 11))
    );
    let got = problems_at(&b, &[5, 6, 8, 9, 12, 14]);
    assert_eq!(
        got[0].1,
        "`rounds: three` is not a whole number — write e.g. `rounds: 2`"
    );
    assert_eq!(
        got[1].1,
        "`timeout: 90` has no unit — write `timeout: 90m` for minutes, `90s` for seconds"
    );
    assert!(got[2].1.contains("at least 1 round"), "{}", got[2].1);
    assert_eq!(
        got[3].1,
        "`timeout: abc` is not a duration — write e.g. `timeout: 45m`, `2h`, `90s` or `1h30m`"
    );
    assert!(
        got[4].1.starts_with("`rounds: 99999999999`"),
        "{}",
        got[4].1
    );
    assert!(got[5].1.contains("longer than zero"), "{}", got[5].1);
}

#[test]
fn scope_with_prose_around_backticked_globs_is_a_problem() {
    let b = parse("- [ ] a\n  scope: `src/parser/**` only the parser\n");
    assert_eq!(b.problems.len(), 1, "{:?}", b.problems);
    assert!(
        b.problems[0].message.contains("\"only the parser\""),
        "{}",
        b.problems[0]
    );
    assert!(b.items[0].details.scope.is_empty());
}

/// A done item never runs again, so what is under it cannot stop tonight's
/// plan; the same lines under an open item do.
#[test]
fn malformed_details_of_done_items_are_not_problems() {
    let text = "\
- [x] old item (done: #3)
  timeout: 90
  verify: `oops
- [x]
- [ ] new item
  timeout: 90
";
    let b = parse(text);
    problems_at(&b, &[6]);
    // Its well-formed details are still read.
    assert_eq!(b.items[0].details.lines.len(), 2);
}

#[test]
fn an_open_item_struck_through_is_a_problem() {
    let text = "- [ ] ~~dropped idea~~\n- [x] ~~done and struck~~\n- [ ] ~~old~~ new wording\n- [ ] ~~a~~ and ~~b~~\n";
    let b = parse(text);
    problems_at(&b, &[1]);
    assert!(b.problems[0].message.contains("`[-]`"), "{}", b.problems[0]);
}

#[test]
fn a_shell_prompt_in_verify_is_a_problem() {
    let b = parse("- [ ] a\n  verify: `$ cargo test`\n");
    assert_eq!(b.problems.len(), 1, "{:?}", b.problems);
    assert!(
        b.problems[0].message.contains("write verify: `cargo test`"),
        "{}",
        b.problems[0]
    );
    assert!(b.items[0].details.verify.is_empty());
}

// ---- nothing is lost silently -------------------------------------------------------

/// A detail outside every item would be dropped: worst, a `question:` meant to
/// block an item would let it run. Each is named with its line.
#[test]
fn details_outside_every_item_are_problems() {
    let text = "\
## Work

scope: src/**

- [ ] blank line, then unindented

accept: orphan after a blank line
question: is this still wanted?

- [ ] a sibling bullet
- accept: a sibling, not a child
- Group
  verify: `make` under a plain bullet
- [ ] lazy line
accept: a lazy continuation belongs to the item
";
    let b = parse(text);
    let got = problems_at(&b, &[3, 7, 8, 11, 13]);
    assert!(
        got[0]
            .1
            .starts_with("`scope:` is not nested under any task item"),
        "{}",
        got[0].1
    );
    assert!(
        got[2].1.starts_with("`question:` is not nested"),
        "{}",
        got[2].1
    );
    assert!(
        got[4].1.starts_with("`verify:` is not nested"),
        "{}",
        got[4].1
    );
    assert_eq!(
        item(&b, "lazy line").details.accept,
        ["a lazy continuation belongs to the item"]
    );
    assert!(item(&b, "blank line").details.lines.is_empty());
}

/// Keywords in prose, code, quotes, comments and tables are not details and not problems.
#[test]
fn keyword_words_in_prose_code_quotes_and_comments_are_left_alone() {
    let text = "\
# Plan

Scope of this file: the API.
Accept criteria are written per item.

```
accept: in a fence
```

    verify: in indented code

> question: a quoted rule

<!--
- [ ] commented out
accept: commented out
-->

| accept: x | y |
|---|---|

- [ ] real
  accept: yes
";
    let b = parse(text);
    assert_eq!(titles(&b), ["real"]);
    assert!(b.problems.is_empty(), "{:?}", b.problems);
    assert_eq!(b.items[0].context, ["question: a quoted rule"]);
}

/// Boxes that may have been meant as open items but are not read as task
/// items (GitHub shows them as text, not as checkboxes) are named, with the fix.
#[test]
fn boxes_that_are_not_task_boxes_are_problems() {
    let text = "\
## S

- [] empty brackets
- [\u{3000}] ideographic space
- [\u{a0}] no-break space
- [ ]\u{3000}ideographic space after
- [ ]no space after
[ ] no list marker
- [!] unknown state
- [?] unknown state

Some paragraph
3. [ ] continues the paragraph

- [ ] the only item
";
    let b = parse(text);
    assert_eq!(titles(&b), ["the only item"]);
    let got = problems_at(&b, &[3, 4, 5, 6, 7, 8, 9, 10, 13]);
    let msg = |n: usize| got.iter().find(|(l, _)| *l == n).unwrap().1.as_str();
    assert!(msg(3).starts_with("empty brackets `[]`"), "{}", msg(3));
    assert!(msg(4).contains("U+3000"), "{}", msg(4));
    assert!(msg(5).contains("U+00A0"), "{}", msg(5));
    assert!(msg(6).contains("followed by U+3000"), "{}", msg(6));
    assert!(msg(7).starts_with("no space after the box"), "{}", msg(7));
    assert!(msg(8).contains("without a list marker"), "{}", msg(8));
    assert!(
        msg(9).starts_with("`[!]` is not a task state"),
        "{}",
        msg(9)
    );
    assert!(msg(13).contains("continues the paragraph"), "{}", msg(13));
    for (_, m) in &got {
        assert!(
            m.contains("`- [ ] title`") || m.contains("`[ ]` to run it"),
            "{m}"
        );
    }
}

/// Bullets pasted from notes apps and word processors, and boxes typed in
/// an input method's full-width mode, are not markdown task items: named.
#[test]
fn typographic_and_full_width_markers_are_problems() {
    let text = "\
## S

• [ ] bullet char
・ [ ] katakana middle dot
－ [ ] full-width hyphen
– [ ] en dash
- ［ ］ full-width brackets
- ［　］ full-width brackets and space
＊ [ ] full-width star
１. [ ] full-width digit
- ［x］ full-width done is left alone
• a plain typographic bullet is prose

- [ ] real
";
    let b = parse(text);
    assert_eq!(titles(&b), ["real"]);
    let got = problems_at(&b, &[3, 4, 5, 6, 7, 8, 9, 10]);
    assert!(
        got[0].1.starts_with("`• [ ]` is written with full-width"),
        "{}",
        got[0].1
    );
    assert!(got[4].1.starts_with("`- ［ ］`"), "{}", got[4].1);
    assert!(got[7].1.starts_with("`１. [ ]`"), "{}", got[7].1);
}

/// `[-]` cancelled, `[/]` in progress, `[~]`, `[>]` deferred, `[<]` scheduled
/// (Obsidian Tasks, bullet journals) and done look-alikes can only mean "do
/// not run": not items, not problems. Letters and numbers are labels.
#[test]
fn skip_states_and_done_marks_are_neither_items_nor_problems() {
    let text = "\
- [-] cancelled
- [/] in progress
- [~] dropped
- [>] deferred
- [<] scheduled
- [ x] done, spaced
- [✓] done, check mark
- [v] done, a v
- [ｘ] done, full-width
- [a] option a
- [1] reference one
- [WIP] a label
- [x](https://example.com) a link
- [ ] the only item
";
    let b = parse(text);
    assert_eq!(titles(&b), ["the only item"]);
    assert!(b.problems.is_empty(), "{:?}", b.problems);
}

/// An open box glued to an HTML tag is raw HTML (GitHub shows the text); with
/// a blank line it is markdown and an item. Comments hide items on purpose.
#[test]
fn open_boxes_glued_into_html_are_problems() {
    let text = "\
<details><summary>More</summary>
- [ ] glued open
- [x] glued done
</details>

<details>
<summary>Fine</summary>

- [ ] read as an item

</details>

<!--
- [ ] commented out
-->

<pre>
- [ ] preformatted
</pre>
";
    let b = parse(text);
    assert_eq!(titles(&b), ["read as an item"]);
    let got = problem_lines(&b);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0].0, 2);
    assert!(
        got[0].1.contains("HTML block that starts on line 1"),
        "{}",
        got[0].1
    );
}

#[test]
fn tasks_in_tables_footnotes_and_indented_code_are_not_items() {
    let text = "\
| task | state |
|---|---|
| - [ ] in a table | open |

Text with a footnote[^1].

[^1]: - [ ] in a footnote

    - [ ] indented code

- [ ] the only item
";
    let b = parse(text);
    assert_eq!(titles(&b), ["the only item"]);
    assert!(b.problems.is_empty(), "{:?}", b.problems);
}

#[test]
fn an_empty_title_is_one_problem_per_item() {
    let b = parse("- [ ] \n\n- [ ]\n- [x]\n");
    let got = problems_at(&b, &[1, 3]);
    assert!(got.iter().all(|(_, m)| m.contains("without a title")));
}

#[test]
fn duplicate_titles_say_what_the_key_is() {
    let b = parse("## A\n\n### One\n\n- [ ] same\n\n### Two\n\n- [ ]  same \n");
    assert_eq!(b.problems.len(), 1, "{:?}", b.problems);
    let p = &b.problems[0];
    assert_eq!(p.line, 9);
    assert!(
        p.message.contains("line 5") && p.message.contains("`###` headings do not count"),
        "{p}"
    );
}

#[test]
fn control_characters_are_problems() {
    let b = parse("- [ ] \u{1b}[2Jclear screen\n- [ ] form\u{c}feed\n- [ ] tab\tis fine\n");
    let got = problems_at(&b, &[1, 2]);
    assert!(got[0].1.contains("U+001B"), "{}", got[0].1);
}

#[test]
fn read_names_the_line_of_bad_bytes_and_refuses_utf16() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("NEXT.md");
    std::fs::write(&path, b"# ok\r\n- [ ] fine\n- [ ] caf\xe9\n").unwrap();
    let err = backlog::read(&path).unwrap_err();
    assert!(
        matches!(
            err,
            BacklogError::NotUtf8 {
                line: 3,
                offset: 26,
                byte: 0xE9,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("NEXT.md:3: not UTF-8 (byte 0xE9"),
        "{err}"
    );

    let utf16: Vec<u8> = [0xFF, 0xFE]
        .into_iter()
        .chain("- [ ] x\n".encode_utf16().flat_map(u16::to_le_bytes))
        .collect();
    std::fs::write(&path, utf16).unwrap();
    let err = backlog::read(&path).unwrap_err();
    assert!(
        matches!(err, BacklogError::Utf16 { bom: "FF FE", .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("save the backlog as UTF-8"),
        "{err}"
    );
}

/// A long backlog reads whole and in order (speed is measured elsewhere, not here).
#[test]
fn a_long_backlog_keeps_every_item() {
    let mut text = String::from("# Big\n\n> rule\n");
    for s in 0..40 {
        text.push_str(&format!("\n## Section {s}\n\n> section rule {s}\n\n"));
        for i in 0..50 {
            text.push_str(&format!(
                "- [ ] item {s}-{i} with `code`\n  accept: works {i}\n  verify: `cargo test t{i}`\n  scope: src/a{i}/**, tests/**\n  context line\n"
            ));
        }
    }
    let b = parse(&text);
    assert_eq!(b.items.len(), 2000);
    assert!(b.problems.is_empty(), "{:?}", &b.problems[..1]);
    let last = b.items.last().unwrap();
    assert_eq!(last.title, "item 39-49 with `code`");
    assert_eq!(last.section.as_deref(), Some("Section 39"));
    assert_eq!(last.context, ["rule", "section rule 39"]);
    assert_eq!(last.details.lines.len(), 4);
    let keys: HashSet<&str> = b.items.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(keys.len(), 2000);
}

// ---- no input panics ------------------------------------------------------------

/// Lines real backlogs are made of, including broken ones.
const FRAGMENTS: &[&str] = &[
    "",
    "# Title",
    "## Section",
    "### Sub",
    "Setext",
    "===",
    "---",
    "+++",
    "...",
    "> rule",
    ">",
    "- [ ] open",
    "* [x] done",
    "+ [X] done",
    "1. [ ] one",
    "3) [ ] three",
    "- [ ]",
    "- []",
    "- [\u{3000}] wide",
    "- [-] cancelled",
    "- [!] odd",
    "[ ] bare",
    "  - [ ] nested",
    "    - [ ] deeper",
    "  accept: a",
    "  accept:",
    "accept: orphan",
    "  - verify: `x`",
    "  verify: `unclosed",
    "  scope: src/**, `a`",
    "  rounds: 2",
    "  rounds: x",
    "  timeout: 45m",
    "  timeout: 90",
    "  question: why?",
    "  **accept:** bold",
    "- plain",
    "  - [ ] grouped",
    "```",
    "~~~",
    "    code",
    "<details>",
    "</details>",
    "<!--",
    "-->",
    "| a | b |",
    "[^1]: - [ ] foot",
    "[1]: http://x",
    "text with `code",
    "\t- [ ]\ttab",
    "- [ ] 加深 taichung:44/70→≤37;在地版",
    "  驗收：中文",
    "- [ ] trailing\\",
    "\u{feff}",
    "- [ ] \u{202e}evil",
    "• [ ] typographic",
    "- ［　］ wide",
    "- [ ] ~~struck~~",
    "  verify: `$ make`",
    "- [ ] nul \0",
    "-[ ] glued",
    "[ ] lazy bare",
    "## [ ] heading box",
    "  `verify: make`",
    "  **accept: whole line**",
    "<!-- closed -->",
    "<!-->",
    "<pre>",
    "</pre>",
    "10. [ ] wide marker",
    "    accept: under the wide marker",
    "- [\t] tab in the box",
    "-",
    "  [ ] box after a bare marker",
];

fn check_invariants(text: &str) {
    let b = parse(text);
    assert!(b.problems.windows(2).all(|w| w[0].line <= w[1].line));
    let line_count = text.split_inclusive(['\n', '\r']).count().max(1) + 1;
    for p in &b.problems {
        assert!(p.line >= 1 && p.line <= line_count, "{p} of {line_count}");
    }
    for i in &b.items {
        let marker = &text[i.marker_offset..i.marker_offset + 3];
        assert!(
            ["[ ]", "[\t]", "[x]", "[X]"].contains(&marker),
            "{marker:?}"
        );
        assert_eq!(i.done, !["[ ]", "[\t]"].contains(&marker));
        assert!(!i.title.contains(['\n', '\r']), "{:?}", i.title);
        assert!(
            i.section
                .as_deref()
                .is_none_or(|s| !s.contains(['\n', '\r']))
        );
        assert!(
            i.details
                .lines
                .iter()
                .all(|l| l.line > i.line && !l.text.contains(['\n', '\r']))
        );
    }
    // Ticking any open item changes that item only.
    if let Some(open) = b.open_items().find(|i| !i.title.is_empty()) {
        let ticked = backlog::tick(text, open, " (done: #1)").unwrap();
        let again = parse(&ticked);
        assert_eq!(again.items.len(), b.items.len(), "{text:?}\n=>\n{ticked:?}");
        assert_eq!(again.open_items().count(), b.open_items().count() - 1);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]

    #[test]
    fn realistic_fragments_never_panic_and_keep_invariants(
        picks in proptest::collection::vec(0..FRAGMENTS.len(), 0..40),
        ending in 0..3usize,
    ) {
        let eol = ["\n", "\r\n", "\r"][ending];
        let text: String = picks.iter().map(|&i| format!("{}{eol}", FRAGMENTS[i])).collect();
        check_invariants(&text);
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
        check_invariants(&text);
    }
}

/// A misspelt detail keyword is a problem with the keyword it meant, not a
/// silent note (a `round: 2` that does not cap the rounds); prose with a
/// colon and notes without one stay notes.
#[test]
fn a_misspelt_detail_keyword_is_named_with_the_one_meant() {
    let text = "- [ ] Add sub\n  - round: 2\n  - acceptance: sub works\n  - Verfy: `cargo test`\n  - timout: 5m\n  - Questions: which sign?\n  - Note: keep it small\n  - Remember this: the docs\n  - round 2 is fine\n";
    let b = nightshift::backlog::parse(std::path::Path::new("NEXT.md"), text);
    let msgs: Vec<String> = b
        .problems
        .iter()
        .map(|p| format!("{}:{}", p.line, p.message))
        .collect();
    assert_eq!(msgs.len(), 5, "{msgs:#?}");
    for (line, typed, meant) in [
        (2, "round", "rounds"),
        (3, "acceptance", "accept"),
        (4, "Verfy", "verify"),
        (5, "timout", "timeout"),
        (6, "Questions", "question"),
    ] {
        assert!(
            msgs.iter().any(|m| m.starts_with(&format!(
                "{line}:`{typed}:` is not a detail keyword — did you mean `{meant}:`?"
            ))),
            "{line} {typed}: {msgs:#?}"
        );
    }
}

// ---- markdown people write that would lose an item --------------------------------

/// `-[ ] x` is no list item (a marker needs a space after it), so no task:
/// on a line of its own or glued under an item as lazy text, the item meant
/// would be lost (in the second case it would ride along as a note of the
/// item above). Nested under an item it is a checklist note, as `- [ ]` is.
#[test]
fn a_list_marker_glued_to_the_box_is_a_problem() {
    let text = "\
# T

-[ ] dash

*[ ] star

+[ ] plus

1.[ ] dot

2)[ ] paren

-[x] done glued is history

- [ ] real
-[ ] lazy glued
[ ] lazy bare
• [ ] lazy typographic
  -[ ] a nested checklist line is a note
  accept: still read
";
    let b = parse(text);
    assert_eq!(titles(&b), ["real"]);
    let got = problems_at(&b, &[3, 5, 7, 9, 11, 16, 17, 18]);
    assert!(
        got[0]
            .1
            .contains("no space between the list marker and the box (`-[ ]`)"),
        "{}",
        got[0].1
    );
    assert!(got[0].1.contains("write `- [ ] title`"), "{}", got[0].1);
    assert!(got[3].1.contains("write `1. [ ] title`"), "{}", got[3].1);
    for (_, message) in &got[5..] {
        assert!(
            message.contains("as more text of the item on line 15"),
            "{message}"
        );
    }
    let real = &b.items[0];
    assert_eq!(real.details.accept, ["still read"]);
    assert_eq!(real.details.lines.len(), 5);
}

/// A comment or a code fence that is never closed hides every line below
/// it: GitHub shows code or nothing, and nightshift would read no item. A
/// closed one is an example on purpose and stays silent (docs/backlog.md).
#[test]
fn an_unclosed_comment_or_fence_hiding_items_is_a_problem() {
    let comment = parse("# T\n\n<!-- draft, finish later\n\n- [ ] one\n* [ ] two\n-[ ] three\n");
    let got = problem_lines(&comment);
    assert_eq!(
        got.iter().map(|(l, _)| *l).collect::<Vec<_>>(),
        [5, 6, 7],
        "{got:#?}"
    );
    assert!(
        got[0]
            .1
            .contains("HTML block opened on line 3, which is never closed with `-->`"),
        "{}",
        got[0].1
    );

    let pre = parse("<pre>\n\n- [ ] in pre\n");
    assert_eq!(problem_lines(&pre).len(), 1, "{:?}", pre.problems);
    assert!(pre.problems[0].message.contains("`</pre>`"));

    // A fence closed by a shorter or different fence is not closed.
    let fence = parse("~~~~\nexample\n~~~\n- [ ] one\n```\n1. [ ] two\n");
    let got = problem_lines(&fence);
    assert_eq!(
        got.iter().map(|(l, _)| *l).collect::<Vec<_>>(),
        [4, 6],
        "{got:#?}"
    );
    assert!(
        got[0]
            .1
            .contains("code fence opened on line 1, which is never closed"),
        "{}",
        got[0].1
    );
    assert!(got[0].1.contains("a line of 4 tildes"), "{}", got[0].1);

    // Inside a group bullet the fence runs to the group's end.
    let grouped = parse("- Group\n  ```\n  - [ ] hidden\n- [ ] after\n");
    assert_eq!(titles(&grouped), ["after"]);
    assert_eq!(
        problem_lines(&grouped)
            .iter()
            .map(|(l, _)| *l)
            .collect::<Vec<_>>(),
        [3]
    );

    // A box after the comment's end on the same line is raw text.
    let after = parse("<!-- id: 7 --> - [ ] after the comment\n");
    assert_eq!(problem_lines(&after).len(), 1, "{:?}", after.problems);
    assert!(
        after.problems[0]
            .message
            .contains("after `-->` on the same line")
    );

    // Closed comments and fences, and `<!-->` (a whole comment), are silent.
    let closed = parse(
        "<!-- - [ ] parked -->\n\n<!--\n- [ ] parked too\n-->\n\n```md\n- [ ] example\n```\n\n<!-->\n\n- [ ] real\n",
    );
    assert_eq!(titles(&closed), ["real"]);
    assert!(closed.problems.is_empty(), "{:?}", closed.problems);
}

/// Some write tasks as headings (`## [ ] Add login`); nothing runs a heading.
#[test]
fn a_heading_with_a_box_is_a_problem() {
    let text = "## [ ] Add login\n\nDetails.\n\n[ ] setext task\n---\n\n### [x] done heading\n\n## Real\n\n- [ ] real\n";
    let b = parse(text);
    assert_eq!(titles(&b), ["real"]);
    let got = problems_at(&b, &[1, 5]);
    assert!(
        got[0].1.contains("write it as a list item, `- [ ] title`"),
        "{}",
        got[0].1
    );
}

/// A whole detail line in emphasis is read; a keyword in a code span or in
/// unclosed emphasis is a problem, not a note whose gate or condition would
/// silently not hold.
#[test]
fn keywords_in_emphasis_are_read_and_in_code_spans_are_problems() {
    let text = "\
- [ ] a
  **accept: the whole line is bold**
  _verify: `make check`_
  *Rounds: 2*
  `verify: make`
  `scope:` src/**
  **accept: unclosed
  ~~accept: struck out is a dropped condition, a note~~
  `accept` without a colon is prose
";
    let b = parse(text);
    let d = &b.items[0].details;
    assert_eq!(d.accept, ["the whole line is bold"]);
    assert_eq!(d.verify, ["make check"]);
    assert_eq!(d.rounds, Some((2, 4)));
    let got = problems_at(&b, &[5, 6, 7]);
    assert!(
        got[0]
            .1
            .starts_with("`verify:` is written inside markup nightshift does not read"),
        "{}",
        got[0].1
    );
    assert!(got[1].1.starts_with("`scope:`"), "{}", got[1].1);
    assert!(got[2].1.starts_with("`accept:`"), "{}", got[2].1);
    assert_eq!(
        d.notes,
        [
            "`verify: make`",
            "`scope:` src/**",
            "**accept: unclosed",
            "~~accept: struck out is a dropped condition, a note~~",
            "`accept` without a colon is prose"
        ]
    );
}

/// UTF-16 without a byte-order mark and UTF-32 are valid UTF-8 byte for
/// byte (ASCII with NULs between): they are refused by name, not read as a
/// NUL problem on every line and no item.
#[test]
fn utf32_and_utf16_without_a_mark_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("NEXT.md");
    let text = "# 待辦\n\n- [ ] 加深 taichung 街頭物\n- [ ] fix the login\n";
    let utf32le: Vec<u8> = text
        .chars()
        .flat_map(|c| (c as u32).to_le_bytes())
        .collect();
    let utf32be_bom: Vec<u8> = std::iter::once('\u{feff}')
        .chain(text.chars())
        .flat_map(|c| (c as u32).to_be_bytes())
        .collect();
    for (bytes, encoding) in [
        (
            text.encode_utf16()
                .flat_map(u16::to_le_bytes)
                .collect::<Vec<u8>>(),
            "UTF-16LE",
        ),
        (
            text.encode_utf16().flat_map(u16::to_be_bytes).collect(),
            "UTF-16BE",
        ),
        (utf32le, "UTF-32LE"),
        (utf32be_bom, "UTF-32BE"),
    ] {
        std::fs::write(&path, bytes).unwrap();
        let err = backlog::read(&path).unwrap_err();
        assert!(
            matches!(err, BacklogError::Wide { encoding: e, .. } if e == encoding),
            "{encoding}: {err:?}"
        );
        assert!(
            err.to_string().ends_with("save the backlog as UTF-8"),
            "{err}"
        );
    }
    // UTF-32LE's mark starts like UTF-16LE's: named by what it is.
    let mut utf32le_bom = vec![0xFF, 0xFE, 0, 0];
    utf32le_bom.extend(text.chars().flat_map(|c| (c as u32).to_le_bytes()));
    std::fs::write(&path, utf32le_bom).unwrap();
    assert!(matches!(
        backlog::read(&path),
        Err(BacklogError::Wide {
            encoding: "UTF-32LE",
            ..
        })
    ));
    // Plain UTF-8, with or without a BOM, reads.
    std::fs::write(&path, format!("\u{feff}{text}")).unwrap();
    assert_eq!(backlog::read(&path).unwrap().items.len(), 2);
}

// ---- an item's identity does not depend on the others -----------------------------

/// The item's key and its contract SHA (docs/backlog.md, docs/contract.md) are the same when other
/// items are added, removed, ticked, edited or renumbered (a formatter then
/// re-indents the item's lines to the wider marker), when the item moves
/// into a group, and when the file's line endings, BOM or indentation
/// characters change: only the item's own text seals it.
#[test]
fn key_and_contract_of_an_item_do_not_change_when_other_items_do() {
    let dir = tempfile::tempdir().unwrap();
    let loaded = nightshift::config::load(&dir.path().join("none.toml")).unwrap();
    let sealed = |text: &str| -> (String, String, Vec<String>) {
        let b = parse(text);
        let plan = nightshift::plan::build_plan(dir.path(), &b, &loaded)
            .unwrap_or_else(|p| panic!("{p:?}\n{text}"));
        let e = plan
            .entries
            .iter()
            .find(|e| e.item.title == "the target")
            .unwrap_or_else(|| panic!("no target in\n{text}"));
        (
            e.item.key.clone(),
            e.contract_sha.clone(),
            e.item.details.notes.clone(),
        )
    };
    let target = "   accept: it works\n   keep the old API\n     (really)\n";
    let base = format!(
        "# Backlog\n\n> rule\n\n## Work\n\n1. [ ] one\n2. [ ] two\n   accept: b\n3. [ ] three\n4. [ ] four\n5. [ ] five\n6. [ ] six\n7. [ ] seven\n8. [ ] eight\n9. [ ] the target\n{target}10. [ ] after\n\n## Later\n\n- [ ] other\n"
    );
    let want = sealed(&base);
    assert_eq!(want.2, ["keep the old API", "  (really)"]);
    let renumbered = base
        .replace("1. [ ] one\n", "1. [ ] zero\n2. [ ] one\n")
        .replace("2. [ ] two", "3. [ ] two")
        .replace("3. [ ] three", "4. [ ] three")
        .replace("4. [ ] four", "5. [ ] four")
        .replace("5. [ ] five", "6. [ ] five")
        .replace("6. [ ] six", "7. [ ] six")
        .replace("7. [ ] seven", "8. [ ] seven")
        .replace("8. [ ] eight", "9. [ ] eight")
        .replace("9. [ ] the target", "10. [ ] the target")
        .replace("10. [ ] after", "11. [ ] after");
    let variants = [
        (
            "an item added above and the list renumbered",
            renumbered.clone(),
        ),
        (
            "renumbered and the target's lines re-indented to the new marker",
            renumbered.replace(target, &target.replace("   ", "    ")),
        ),
        (
            "the target's indentation in tabs",
            base.replace(target, &target.replace("   ", "\t")),
        ),
        (
            "the target moved into a group bullet",
            base.replace(&format!("9. [ ] the target\n{target}"), "")
                .replace(
                    "10. [ ] after\n",
                    &format!(
                        "10. [ ] after\n\n- Group\n  - [ ] the target\n{}",
                        target.replace("   ", "    ")
                    ),
                ),
        ),
        ("an item removed", base.replace("3. [ ] three\n", "")),
        (
            "another item ticked",
            base.replace("2. [ ] two", "2. [x] two (done: #4)"),
        ),
        (
            "another item's details edited",
            base.replace("   accept: b\n", "   accept: b, better\n   scope: src/**\n"),
        ),
        (
            "another section added",
            format!("{base}\n## New\n\n> new rule\n\n- [ ] new\n"),
        ),
        (
            "another item under a group bullet",
            base.replace("## Later\n\n", "## Later\n\n- Group\n  - [ ] grouped\n"),
        ),
        ("CRLF line endings", base.replace('\n', "\r\n")),
        ("a BOM", format!("\u{feff}{base}")),
        ("front matter", format!("---\ntitle: Backlog\n---\n{base}")),
    ];
    for (what, text) in variants {
        assert_eq!(sealed(&text), want, "{what}:\n{text}");
    }
    // The item's own text does seal it.
    assert_ne!(
        sealed(&base.replace("accept: it works", "accept: it works fast")).1,
        want.1
    );
}

/// `sync` ticks several boxes of one file from the end backwards: in a file
/// with a BOM, front matter, mixed line endings, groups and ordered lists,
/// only the ticked lines change, each keeping its own line ending.
#[test]
fn several_ticks_change_only_their_lines_and_keep_every_line_ending() {
    let text = "\u{feff}---\r\ntitle: x\r\n---\r\n# B\r\n\r\n## S\n\n1. [ ] one\r\n   accept: a\r\n2. [ ] two  \n- Group\r\n  - [ ] 中文標題 🚀\r- [ ] last";
    let b = parse(text);
    assert!(b.problems.is_empty(), "{:?}", b.problems);
    assert_eq!(titles(&b), ["one", "two", "中文標題 🚀", "last"]);
    let mut out = text.to_string();
    let mut open: Vec<&Item> = b.open_items().collect();
    open.sort_by_key(|i| std::cmp::Reverse(i.marker_offset));
    for (n, item) in open.iter().enumerate() {
        out = backlog::tick(&out, item, &format!(" (done: #{n})")).unwrap();
    }
    assert_eq!(
        out,
        "\u{feff}---\r\ntitle: x\r\n---\r\n# B\r\n\r\n## S\n\n1. [x] one (done: #3)\r\n   accept: a\r\n2. [x] two (done: #2)  \n- Group\r\n  - [x] 中文標題 🚀 (done: #1)\r- [x] last (done: #0)"
    );
    let again = parse(&out);
    assert_eq!(again.items.len(), 4);
    assert_eq!(again.open_items().count(), 0);
}

/// A tab in the box is an open box to GitHub and pulldown-cmark: the item is
/// read, and `sync` ticks it like any other.
#[test]
fn a_tab_in_the_box_is_an_open_item_that_ticks() {
    let text = "- [\t] tab in the box\r\n- [ ] next\r\n";
    let b = parse(text);
    assert_eq!(titles(&b), ["tab in the box", "next"]);
    assert!(!b.items[0].done);
    assert!(b.problems.is_empty(), "{:?}", b.problems);
    assert_eq!(
        backlog::tick(text, &b.items[0], " (done: #5)").unwrap(),
        "- [x] tab in the box (done: #5)\r\n- [ ] next\r\n"
    );
    // A tab box hidden by an unclosed comment is found like a space box.
    let hidden = parse("<!--\n- [\t] hidden\n");
    assert_eq!(
        problem_lines(&hidden)
            .iter()
            .map(|(l, _)| *l)
            .collect::<Vec<_>>(),
        [2]
    );
}

/// GitHub allows the box on the line after a bare `-`; pulldown-cmark reads
/// no task there. The problem says where the marker is and how to join them.
#[test]
fn a_box_on_the_line_after_a_bare_marker_is_named_as_such() {
    let b = parse("# T\n\n-\n  [ ] on the next line\n\n- [ ] real\n");
    assert_eq!(titles(&b), ["real"]);
    let got = problem_lines(&b);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0].0, 4);
    assert!(
        got[0].1.contains("after its list marker (line 3)"),
        "{}",
        got[0].1
    );
    assert!(
        got[0].1.contains("write `- [ ] title` on one line"),
        "{}",
        got[0].1
    );
}

/// Details indented less than an ordered item's text (2 spaces under `1. `)
/// start a list of their own: the problem says how far to indent.
#[test]
fn details_indented_less_than_an_ordered_items_text_are_problems() {
    let b = parse("1. [ ] a\n  - accept: x\n10. [ ] b\n   accept: lazy text of b is read\n");
    assert_eq!(titles(&b), ["a", "b"]);
    assert!(b.items[0].details.accept.is_empty());
    assert_eq!(b.items[1].details.accept, ["lazy text of b is read"]);
    let got = problems_at(&b, &[2]);
    assert!(got[0].1.contains("3 under `1. `"), "{}", got[0].1);
}

/// A line without `>` after a quote's text continues the quote: a box
/// meant as an item there would become quoted context. Quoted boxes (`> - [ ]`)
/// are context on purpose and stay silent.
#[test]
fn a_box_continuing_a_block_quote_is_a_problem() {
    let text =
        "> rule\n-[ ] glued\n\n> rule two\n[ ] bare\n> - [ ] quoted on purpose\n\n- [ ] real\n";
    let b = parse(text);
    assert_eq!(titles(&b), ["real"]);
    let got = problems_at(&b, &[2, 5]);
    assert!(
        got[0].1.contains("more of the block quote on line 1"),
        "{}",
        got[0].1
    );
    assert!(
        got[1].1.contains("more of the block quote on line 4"),
        "{}",
        got[1].1
    );
}

/// Five spaces after a list marker start indented code inside the item, so
/// no task: the problem says so rather than blaming a paragraph above.
#[test]
fn five_spaces_after_the_marker_are_named() {
    let b = parse("# T\n\n-     [ ] five spaces\n\n-    [ ] four spaces are fine\n");
    assert_eq!(titles(&b), ["four spaces are fine"]);
    let got = problem_lines(&b);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0].0, 3);
    assert!(
        got[0]
            .1
            .starts_with("5 spaces after the list marker make the rest of the line code"),
        "{}",
        got[0].1
    );
}

/// Every item's contract carries its section's block quotes (docs/backlog.md#context): a long
/// quote would be copied into each one, so more than 64 KiB is one problem at
/// the quote, once per section, and parsing stays linear.
#[test]
fn block_quote_context_over_64_kib_is_one_problem_per_section() {
    let big = format!("> {}\n", "context ".repeat(9000));
    let b = parse(&format!(
        "## Big\n\n{big}\n- [ ] One\n- [ ] Two\n\n## Small\n\n> short\n\n- [ ] Three\n"
    ));
    let over: Vec<_> = b
        .problems
        .iter()
        .filter(|p| p.message.contains("more than 64 KiB"))
        .collect();
    assert_eq!(over.len(), 1, "{:?}", b.problems);
    assert_eq!(over[0].line, 3, "named at the quote");
    assert!(
        over[0].message.contains("move the long text into a file"),
        "{}",
        over[0].message
    );
    let three = b.items.iter().find(|i| i.title == "Three").unwrap();
    assert_eq!(
        three.context,
        ["short"],
        "other sections keep their context"
    );

    // A quote under each of 5,000 items: every item would carry all 5,000.
    let mut text = String::from("## Many\n\n");
    for n in 0..5000 {
        text.push_str(&format!(
            "- [ ] Item {n}\n\n> why item {n} matters, at some length to add up\n\n"
        ));
    }
    let b = parse(&text);
    assert_eq!(b.items.len(), 5000);
    assert_eq!(
        b.problems
            .iter()
            .filter(|p| p.message.contains("more than 64 KiB"))
            .count(),
        1,
        "{:?}",
        &b.problems[..b.problems.len().min(3)]
    );
    assert!(b.items.iter().all(|i| i.context.is_empty()));
}
