//! Build script: tells cargo to rebuild when a migration is added, because
//! `sqlx::migrate!()` embeds `migrations/` at compile time (DEPS.md).

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
