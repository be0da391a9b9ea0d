//! Verdicts that blame the right party: the backup (exit 1), the world or drcheck's own
//! limits (exit 3). Each test here pins a case that once blamed the wrong one.

use drcheck_e2e::hostile::{Lab, sh};

/// A plain dump big enough that half of it, compressed, is a truncated stream.
fn dump_text() -> String {
    let mut s = String::from(
        "--\n-- PostgreSQL database dump\n--\n\n-- Dumped from database version 15.18\n\n\
         create table t (id int, v text);\ncopy t (id, v) from stdin;\n",
    );
    for i in 0..100_000 {
        s.push_str(&format!("{i}\tvalue number {i} with some text to compress {}\n", i * 7919 % 10007));
    }
    s.push_str("\\.\n");
    s
}

/// A compressed backup cut short is the backup's fault (exit 1, "truncated"), not a
/// failed download (exit 3) — for gzip, zstd and lz4 alike. The whole file passes.
#[test]
fn a_truncated_compressed_backup_is_the_backups_fault() {
    let lab = Lab::new();
    let sql = lab.root.path().join("d.sql");
    std::fs::write(&sql, dump_text()).unwrap();
    let config = lab.config("", "");
    for (ext, cmd) in [("gz", "gzip -c"), ("zst", "zstd -q -c"), ("lz4", "lz4 -q -c")] {
        let whole = lab.root.path().join(format!("d.sql.{ext}"));
        sh(&format!("{cmd} {} > {}", sql.display(), whole.display()));
        let bytes = std::fs::read(&whole).unwrap();
        lab.put(&format!("whole.sql.{ext}"), &bytes);
        lab.put(&format!("half.sql.{ext}"), &bytes[..bytes.len() / 2]);

        let (code, run, all) = lab.verify(&config, &format!("whole.sql.{ext}"));
        assert_eq!(code, Some(0), "{ext}: the whole backup: {run}\n{all}");

        let (code, run, all) = lab.verify(&config, &format!("half.sql.{ext}"));
        assert_eq!(code, Some(1), "{ext}: {run}\n{all}");
        assert_eq!(run["result"], "failed", "{ext}: {run}");
        let msg = run["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains("truncated") || msg.contains("corrupt"), "{ext}: {msg}");
        assert!(!msg.contains("download failed"), "{ext}: blamed the store: {msg}");
    }
}

/// A reader that stops early (`| head -1`) ends the command quietly: no panic, exit 0.
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let lab = Lab::new();
    for i in 0..3000 {
        lab.put(&format!("orders/{i:05}-a-backup-with-a-rather-long-name-to-fill-the-pipe.dump"), b"PGDMP");
    }
    let config = lab.config("", "prefix = \"orders/\"");
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "{} --config {} backups list --target t | head -1 >/dev/null; echo \"status=${{PIPESTATUS[0]}}\"",
            drcheck_e2e::drcheck_bin().display(),
            config.display()
        ))
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("status=0"), "{text}");
    assert!(!text.contains("panicked") && !text.contains("Broken pipe"), "{text}");
}
