fn main() {
    // sqlx::migrate!() embeds migrations/ at compile time: rebuild when a file is added there (DEPS.md).
    println!("cargo:rerun-if-changed=migrations");
}
