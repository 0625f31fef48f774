//! `nightshift serve [--listen ADDR] [--run ID]` and `drain --serve`
//! (docs/serve.md): parse, resolve the repository and the ledger, bind,
//! print where the board is, serve until a signal.

use tokio_util::sync::CancellationToken;

use super::{Cli, data_dir, repo_identity, repo_root};
use crate::error::Result;
use crate::serve::{self, state::Source};

/// Connections the board of `drain --serve` keeps to the ledger: its own
/// pool, apart from the night's (one of them is the LISTEN connection).
pub const BESIDE_POOL: u32 = 2;

/// What the board shows of this repository, `run` as given (`None`: the
/// newest run).
async fn source(cli: &Cli, pool: &sqlx::PgPool, run: Option<&str>) -> Result<Source> {
    let repo = repo_root(cli)?;
    let id = repo_identity(cli, &repo);
    // A command that only reads the ledger does not fail on a config typo:
    // the default retention then.
    let retention = crate::cli::load_config(cli, &repo)
        .map(|l| l.config.serve.retention)
        .unwrap_or(crate::config::DEFAULT_RETENTION);
    let run = match run {
        Some(r) => Some(crate::views::resolve_run_id(pool, &id, r).await?),
        None => None,
    };
    // A key that cannot be read only means nothing is shown resumable.
    let _ = crate::cli::install_approval_key();
    Ok(Source {
        repo: id,
        run,
        key_path: crate::approval::key_path(&data_dir()),
        retention,
    })
}

/// Says where the board is, on standard output (one line, then the token's
/// note when there is one).
fn announce(bound: &serve::Bound) {
    println!("board: {}", bound.url());
    if bound.url().contains("?token=") {
        println!(
            "the token is for this server's life: open that address once; the browser keeps an HttpOnly cookie"
        );
    }
}

/// `nightshift serve`.
pub(crate) async fn serve(cli: &Cli, listen: &str, run: Option<&str>) -> Result<()> {
    let bound = serve::bind(listen).await?;
    let lg = crate::cli::ledger().await?;
    let source = source(cli, &lg.pool, run).await?;
    announce(&bound);
    let stop = CancellationToken::new();
    let on_signal = stop.clone();
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).ok();
        let mut hup = signal(SignalKind::hangup()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { if let Some(t) = term.as_mut() { t.recv().await } else { std::future::pending().await } } => {}
            _ = async { if let Some(h) = hup.as_mut() { h.recv().await } else { std::future::pending().await } } => {}
        }
        on_signal.cancel();
    });
    bound.serve(lg.pool.clone(), source, stop).await
}

/// The board of `drain --serve [ADDR]` (`listen`; `None`: no board), bound
/// before anything runs — an address in use stops the drain there — then
/// served on its own task with its own pool until the returned guard is
/// dropped (the drain's end); it never waits on the night or stops it.
///
/// # Errors
/// The address cannot be bound; the ledger does not answer.
pub(crate) async fn beside(
    cli: &Cli,
    listen: Option<&str>,
) -> Result<Option<tokio_util::sync::DropGuard>> {
    match listen {
        Some(l) => Ok(Some(spawn_beside(cli, l).await?)),
        None => Ok(None),
    }
}

async fn spawn_beside(cli: &Cli, listen: &str) -> Result<tokio_util::sync::DropGuard> {
    let bound = serve::bind(listen).await?;
    let src = crate::ledger::db_source_from_env();
    let lg = crate::ledger::Ledger::connect_pool(&src, BESIDE_POOL)
        .await
        .map_err(|e| crate::error::Error::Ledger {
            detail: e.to_string(),
            outage: false,
            source: None,
        })?;
    let source = source(cli, &lg.pool, None).await?;
    announce(&bound);
    let stop = CancellationToken::new();
    let guard = stop.clone().drop_guard();
    tokio::spawn(async move {
        if let Err(e) = bound.serve(lg.pool.clone(), source, stop).await {
            tracing::warn!("the board stopped: {e}");
            eprintln!("warning: the board stopped ({e}); the drain goes on");
        }
    });
    Ok(guard)
}
