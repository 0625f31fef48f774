//! One walk over pulldown-cmark's events: where the task items, sections,
//! block quotes, code, HTML blocks and headings are ([`Scan`]).
//!
//! Not for reading an item's lines (`item`, `details`) or judging lines the walk
//! did not claim (`lints`).

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use std::ops::Range;

/// An item as found by the markdown scan, before its lines are read.
pub(super) struct RawItem {
    /// Byte range of the whole list item.
    pub(super) range: Range<usize>,
    pub(super) marker_offset: usize,
    pub(super) done: bool,
    /// Index into `Scan::regions`.
    pub(super) region: usize,
    /// Code and HTML blocks nested in the item: their lines are never keywords.
    pub(super) opaque: Vec<Range<usize>>,
}

/// A list item while its events are being read.
struct Frame {
    range: Range<usize>,
    /// Offset and state of its own task marker, if it has one.
    marker: Option<(usize, bool)>,
    opaque: Vec<Range<usize>>,
}

/// A stretch of the document between headings of level 1 or 2 (the outline
/// rule: a `#` heading closes the `##` section above it).
pub(super) struct Region {
    /// The `##` heading's text; `None` for the start and for `#` regions.
    pub(super) heading: Option<String>,
    /// Before the first `##` heading: its block quotes are context for all items.
    pub(super) preamble: bool,
}

/// A block quote outside every list, and the region it sits in.
pub(super) struct Quote {
    pub(super) range: Range<usize>,
    pub(super) region: usize,
}

/// What one pass over the markdown events finds; all ranges index the full text.
pub(super) struct Scan {
    pub(super) items: Vec<RawItem>,
    pub(super) regions: Vec<Region>,
    pub(super) quotes: Vec<Quote>,
    /// Where lines are owned or deliberately opaque: items, and outside items
    /// code blocks, HTML blocks, block quotes and headings. Every other line
    /// is checked for details and boxes that would not be read.
    pub(super) claimed: Vec<Range<usize>>,
    /// HTML blocks outside items and block quotes (checked for glued task boxes).
    pub(super) html_blocks: Vec<Range<usize>>,
    /// Fenced code blocks outside items and block quotes (checked for a
    /// missing closing fence that hides the items below it).
    pub(super) fences: Vec<Range<usize>>,
    /// Headings outside items and block quotes (checked for a task box).
    pub(super) headings: Vec<Range<usize>>,
}

/// Walks the markdown events once. `body` is the text after any BOM and
/// front matter, and `base` its offset in the full text.
pub(super) fn scan(body: &str, base: usize) -> Scan {
    let mut sc = Scanner::new(body, base);
    for (event, range) in Parser::new_ext(body, Options::ENABLE_TASKLISTS).into_offset_iter() {
        sc.event(event, range.start + base..range.end + base);
    }
    sc.out
}

/// The walk of [`scan`] over pulldown-cmark's events: what it found so far
/// and where it is (lists, quotes, the task item being read, the heading).
struct Scanner<'b> {
    body: &'b str,
    base: usize,
    out: Scan,
    lists: usize,
    quotes: usize,
    seen_h2: bool,
    /// Open list items, outermost first.
    stack: Vec<Frame>,
    /// The index in `stack` of the task item being read (nothing nested in
    /// it can be an item).
    owner: Option<usize>,
    /// Inline extent of the `#`/`##` heading being read, and its level.
    heading: Option<(HeadingLevel, Option<Range<usize>>)>,
}

impl<'b> Scanner<'b> {
    fn new(body: &'b str, base: usize) -> Scanner<'b> {
        Scanner {
            body,
            base,
            out: Scan {
                items: Vec::new(),
                regions: vec![Region {
                    heading: None,
                    preamble: true,
                }],
                quotes: Vec::new(),
                claimed: Vec::new(),
                html_blocks: Vec::new(),
                fences: Vec::new(),
                headings: Vec::new(),
            },
            lists: 0,
            quotes: 0,
            seen_h2: false,
            stack: Vec::new(),
            owner: None,
            heading: None,
        }
    }

    /// One event at `range` (offsets in the whole file).
    fn event(&mut self, event: Event<'_>, range: Range<usize>) {
        self.extend_heading(&event, &range);
        match event {
            Event::Start(Tag::List(_)) => self.lists += 1,
            Event::End(TagEnd::List(_)) => self.lists -= 1,
            Event::Start(Tag::Item) => self.stack.push(Frame {
                range,
                marker: None,
                opaque: Vec::new(),
            }),
            // pulldown-cmark sends the marker right after its item starts.
            Event::TaskListMarker(done) => {
                if self.owner.is_none()
                    && self.quotes == 0
                    && let Some(top) = self.stack.last_mut()
                {
                    top.marker = Some((range.start, done));
                    self.owner = Some(self.stack.len() - 1);
                }
            }
            Event::End(TagEnd::Item) => self.item_end(),
            Event::Start(Tag::CodeBlock(_)) | Event::Start(Tag::HtmlBlock) => {
                self.block(&event, range)
            }
            Event::Start(Tag::BlockQuote(_)) => self.quote_start(range),
            Event::End(TagEnd::BlockQuote(_)) => self.quotes -= 1,
            Event::Start(Tag::Heading { level, .. }) => self.heading_start(level, range),
            Event::End(TagEnd::Heading(_)) => self.heading_end(),
            _ => {}
        }
    }

    /// Widens the inline extent of the heading being read to `range`.
    fn extend_heading(&mut self, event: &Event<'_>, range: &Range<usize>) {
        let Some((_, extent)) = self.heading.as_mut() else {
            return;
        };
        if matches!(event, Event::End(TagEnd::Heading(_))) || range.is_empty() {
            return;
        }
        let r = extent.get_or_insert(range.clone());
        r.start = r.start.min(range.start);
        r.end = r.end.max(range.end);
    }

    /// The end of a list item: a task item outside any other is an item.
    fn item_end(&mut self) {
        let Some(frame) = self.stack.pop() else {
            return;
        };
        if self.owner == Some(self.stack.len())
            && let Some((marker_offset, done)) = frame.marker
        {
            self.owner = None;
            self.out.claimed.push(frame.range.clone());
            self.out.items.push(RawItem {
                range: frame.range,
                marker_offset,
                done,
                region: self.out.regions.len() - 1,
                opaque: frame.opaque,
            });
        }
    }

    /// A code or HTML block: opaque inside an item, claimed outside one.
    fn block(&mut self, event: &Event<'_>, range: Range<usize>) {
        if let Some(i) = self.owner {
            self.stack[i].opaque.push(range);
            return;
        }
        if self.quotes == 0 && matches!(event, Event::Start(Tag::HtmlBlock)) {
            self.out.html_blocks.push(range.clone());
        }
        if self.quotes == 0
            && matches!(
                event,
                Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(_)))
            )
        {
            self.out.fences.push(range.clone());
        }
        self.out.claimed.push(range);
    }

    /// A block quote: a top-level one outside lists is context.
    fn quote_start(&mut self, range: Range<usize>) {
        self.quotes += 1;
        if self.quotes == 1 && self.lists == 0 {
            self.out.quotes.push(Quote {
                range: range.clone(),
                region: self.out.regions.len() - 1,
            });
        }
        if self.owner.is_none() {
            self.out.claimed.push(range);
        }
    }

    /// A heading starts; `#` and `##` outside lists and quotes open a region.
    fn heading_start(&mut self, level: HeadingLevel, range: Range<usize>) {
        if self.owner.is_none() {
            if self.quotes == 0 {
                self.out.headings.push(range.clone());
            }
            self.out.claimed.push(range);
        }
        if self.lists == 0 && self.quotes == 0 && level <= HeadingLevel::H2 {
            self.heading = Some((level, None));
        }
    }

    /// A `#`/`##` heading ended: the region it opens (a `##` section, or
    /// after a `#`, none).
    fn heading_end(&mut self) {
        let Some((level, extent)) = self.heading.take() else {
            return;
        };
        let base = self.base;
        let region = if level == HeadingLevel::H2 {
            self.seen_h2 = true;
            let text = extent.map(|r| heading_text(&self.body[r.start - base..r.end - base]));
            Region {
                heading: Some(text.unwrap_or_default()),
                preamble: false,
            }
        } else {
            Region {
                heading: None,
                preamble: !self.seen_h2,
            }
        };
        self.out.regions.push(region);
    }
}

/// A heading's inline source on one line: a setext heading may span several.
fn heading_text(source: &str) -> String {
    source
        .split(['\n', '\r'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}
