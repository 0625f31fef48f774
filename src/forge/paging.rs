//! Lists read page after page, by `Link: rel="next"` or page numbers.

use super::body::header;
use super::client::Forge;
use super::error::ForgeError;
use super::exchange::Verb;

/// Page size asked of list calls (GitHub's maximum; a server may serve fewer).
pub(super) const PER_PAGE: usize = 100;

/// Upper bound on pages read by one list look-up, so a huge repository
/// cannot turn a look-up into an unbounded crawl (2,000 items at 100 a page).
pub(super) const MAX_PAGES: u32 = 20;

/// One page of a list: its items, where the next page is (if anywhere), and
/// whether the answer had a `Link` header at all.
pub(super) struct Page<T> {
    pub(super) items: Vec<T>,
    pub(super) next: Option<String>,
    pub(super) linked: bool,
}

impl Forge {
    /// Every item of the repository list at `rest` (a path under the
    /// repository with its query), page after page: GitHub's `Link:
    /// rel="next"` URL when the answer has a `Link` header (a server may
    /// serve fewer than the 100 asked for), else the next page number while
    /// pages come back full. At most [`MAX_PAGES`] pages; a longer list is
    /// cut with a warning.
    pub(super) async fn list<T: serde::de::DeserializeOwned>(
        &self,
        rest: &str,
    ) -> Result<Vec<T>, ForgeError> {
        self.list_in(rest, "").await
    }

    /// [`Forge::list`] of a list that each page's JSON object holds under
    /// `key` (`check_runs` of `GET …/check-runs`); `""`: the page is the
    /// array itself.
    pub(super) async fn list_in<T: serde::de::DeserializeOwned>(
        &self,
        rest: &str,
        key: &str,
    ) -> Result<Vec<T>, ForgeError> {
        let numbered = |page: u32| {
            let sep = if rest.contains('?') { '&' } else { '?' };
            self.repo_path(&format!("{rest}{sep}per_page={PER_PAGE}&page={page}"))
        };
        let mut all = Vec::new();
        let mut path = numbered(1);
        for page in 1..=MAX_PAGES {
            let got: Page<T> = self.page(&path, key).await?;
            let full = got.items.len() >= PER_PAGE;
            all.extend(got.items);
            path = match (got.next, got.linked) {
                (Some(next), _) => next,
                // No `Link` at all (a minimal server): a full page may have
                // a successor.
                (None, false) if full => numbered(page + 1),
                _ => return Ok(all),
            };
        }
        tracing::warn!(
            list = rest,
            pages = MAX_PAGES,
            "GitHub list cut after the page cap"
        );
        Ok(all)
    }

    /// One page of a list at `path` (its array, or the one under `key`),
    /// and the path of the next page from the
    /// `Link` header (its host is ignored: the next page is asked of the
    /// same API base, so the token never goes elsewhere).
    pub(super) async fn page<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        key: &str,
    ) -> Result<Page<T>, ForgeError> {
        let reply = self.get_ok(path).await?;
        let items: Vec<T> = if key.is_empty() {
            self.decode(Verb::Get, path, &reply)?
        } else {
            let mut v: serde_json::Value = self.decode(Verb::Get, path, &reply)?;
            serde_json::from_value(v[key].take()).map_err(|e| ForgeError::Decode {
                method: "GET",
                path: path.to_string(),
                message: format!("the answer has no list `{key}`: {e}"),
                excerpt: String::new(),
            })?
        };
        let link = header(&reply.headers, "link");
        let next = link.and_then(link_next).and_then(|url| {
            let uri: http::Uri = url.parse().ok()?;
            uri.path_and_query().map(|pq| pq.as_str().to_string())
        });
        Ok(Page {
            items,
            next,
            linked: link.is_some(),
        })
    }
}

/// The `rel="next"` URL of a `Link` header (`<URL>; rel="next", <URL>;
/// rel="last"`). URLs are read between `<` and `>`, so commas inside them
/// (label lists) do not split them.
pub(super) fn link_next(link: &str) -> Option<String> {
    let mut rest = link;
    while let Some(open) = rest.find('<') {
        let close = open + rest[open..].find('>')?;
        let url = &rest[open + 1..close];
        let params_end = rest[close..].find('<').map_or(rest.len(), |i| close + i);
        let params = &rest[close + 1..params_end];
        let is_next = params.split(';').any(|p| {
            let p = p.trim().trim_end_matches(',').trim();
            p.strip_prefix("rel=")
                .map(|v| v.trim_matches('"').split_whitespace().any(|r| r == "next"))
                .unwrap_or(false)
        });
        if is_next {
            return Some(url.to_string());
        }
        rest = &rest[params_end..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_header_next_is_found() {
        let link = r#"<https://api.github.com/repositories/1/issues?labels=a,b&page=2>; rel="next", <https://api.github.com/repositories/1/issues?labels=a,b&page=5>; rel="last""#;
        assert_eq!(
            link_next(link).as_deref(),
            Some("https://api.github.com/repositories/1/issues?labels=a,b&page=2")
        );
        let last_page = r#"<https://api.github.com/repositories/1/issues?page=4>; rel="prev", <https://api.github.com/repositories/1/issues?page=1>; rel="first""#;
        assert_eq!(link_next(last_page), None);
        assert_eq!(
            link_next(r#"<https://h/x?page=3>;rel=next"#).as_deref(),
            Some("https://h/x?page=3")
        );
        assert_eq!(link_next(""), None);
    }
}
