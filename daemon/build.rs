//! Embeds the commit drcheck was built from (`drcheck --version`): `git rev-parse` of
//! the checkout's HEAD; `unknown` outside a checkout (a source tarball) — or
//! `DRCHECK_COMMIT` when the builder sets it (an image build without `.git`).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=DRCHECK_COMMIT");
    let commit = std::env::var("DRCHECK_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]));
    println!("cargo:rustc-env=DRCHECK_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
    // A new commit (or a checkout) changes HEAD or the ref it points to.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{r}");
        }
    }
}
