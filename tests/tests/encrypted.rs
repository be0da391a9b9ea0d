//! End-to-end (issue 27): backups encrypted the way backup scripts encrypt them — with
//! the real `age` and `gpg` CLIs — restore from moto's S3 server with the keys kept in
//! `[target.decrypt]`; a missing key, a wrong key and an altered byte each get the
//! verdict they deserve, and no secret shows anywhere.

use drcheck_e2e::scenario::Scene;
use drcheck_e2e::{assert_all_validators_pass, drcheck, only_run, stderr, stdout};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(180);
const AGE_PASS: &str = "correct horse battery staple 27";
const GPG_PASS: &str = "gpg-symmetric-passphrase-27";

fn sh(cmd: &str) -> String {
    let out = Command::new("bash").arg("-c").arg(cmd).output().unwrap();
    assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A GnuPG home of the test's own; its agent is stopped when the test ends, even on failure.
struct GpgHome(PathBuf);

impl GpgHome {
    fn new(dir: &Path, name: &str) -> GpgHome {
        let home = dir.join(name);
        std::fs::create_dir_all(&home).unwrap();
        std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        GpgHome(home)
    }

    fn gpg(&self, args: &str) -> String {
        sh(&format!("gpg --homedir {} --batch --pinentry-mode loopback {args}", self.0.display()))
    }

    /// A key like an ops team's: ed25519 primary, cv25519 encryption subkey, protected by
    /// `GPG_PASS` (one `gpg_passphrase` serves the key and symmetric backups). Returns (armoured secret key, encryption subkey id).
    fn make_key(&self, email: &str) -> (String, String) {
        self.gpg(&format!("--passphrase '{GPG_PASS}' --quick-gen-key 'Ops <{email}>' ed25519 sign never"));
        let fpr = self.fingerprint(email);
        self.gpg(&format!("--passphrase '{GPG_PASS}' --quick-add-key {fpr} cv25519 encr never"));
        let secret = self.gpg(&format!("--passphrase '{GPG_PASS}' --armor --export-secret-keys {email}"));
        let listing = self.gpg(&format!("--with-colons --list-keys {email}"));
        let sub = listing.lines().find(|l| l.starts_with("sub:")).unwrap().split(':').nth(4).unwrap().to_string();
        (secret, sub)
    }

    fn fingerprint(&self, email: &str) -> String {
        let listing = self.gpg(&format!("--with-colons --list-keys {email}"));
        listing.lines().find(|l| l.starts_with("fpr:")).unwrap().split(':').nth(9).unwrap().to_string()
    }
}

impl Drop for GpgHome {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf").arg("--homedir").arg(&self.0).args(["--kill", "all"]).output();
    }
}

/// `age -p` reads its passphrase from a terminal only: give it one.
fn age_passphrase_encrypt(input: &Path, output: &Path) {
    sh(&format!(
        "(sleep 1; printf '%s\\n' '{AGE_PASS}'; sleep 0.5; printf '%s\\n' '{AGE_PASS}'; sleep 1) | timeout 60 script -q -c 'age -p -o {} {}' /dev/null >/dev/null",
        output.display(),
        input.display()
    ));
    assert!(std::fs::read(output).unwrap().starts_with(b"age-encryption.org/v1\n-> scrypt"));
}

struct Keys {
    age_identity: String,
    age_recipient: String,
    other_identity: String,
    other_recipient: String,
    gpg_secret: String,
    gpg_subkey: String,
    gpg_fpr: String,
    other_gpg_secret: String,
    other_gpg_subkey: String,
    _homes: Vec<GpgHome>,
}

fn make_keys(dir: &Path) -> Keys {
    let age_identity = sh("age-keygen 2>/dev/null");
    let age_recipient = sh(&format!("printf '%s' '{age_identity}' | age-keygen -y")).trim().to_string();
    let other_identity = sh("age-keygen 2>/dev/null");
    let other_recipient = sh(&format!("printf '%s' '{other_identity}' | age-keygen -y")).trim().to_string();
    let ops = GpgHome::new(dir, "gnupg-ops");
    let (gpg_secret, gpg_subkey) = ops.make_key("ops@example.com");
    let gpg_fpr = ops.fingerprint("ops@example.com");
    let other = GpgHome::new(dir, "gnupg-other");
    let (other_gpg_secret, other_gpg_subkey) = other.make_key("other@example.com");
    Keys {
        age_identity,
        age_recipient,
        other_identity,
        other_recipient,
        gpg_secret,
        gpg_subkey,
        gpg_fpr,
        other_gpg_secret,
        other_gpg_subkey,
        _homes: vec![ops, other],
    }
}

/// The config's `[target.decrypt]`, every secret through the environment.
const DECRYPT: &str = "[target.decrypt]\nage_identity = \"${AGE_IDENTITY}\"\nage_passphrase = \"${AGE_PASSPHRASE}\"\ngpg_passphrase = \"${GPG_PASSPHRASE}\"\ngpg_secret_key = \"${GPG_SECRET_KEY}\"\n";

fn env(scene: &Scene, age_identity: &str, gpg_secret: &str, gpg_pass: &str) -> Vec<(&'static str, String)> {
    let mut env = scene.env();
    env.push(("AGE_IDENTITY", age_identity.to_string()));
    env.push(("AGE_PASSPHRASE", AGE_PASS.to_string()));
    env.push(("GPG_PASSPHRASE", gpg_pass.to_string()));
    env.push(("GPG_SECRET_KEY", gpg_secret.to_string()));
    env
}

fn verify(scene: &Scene, config: &Path, key: &str, env: &[(&'static str, String)]) -> (i32, serde_json::Value, String) {
    let (code, out, all) = run(scene, config, key, env);
    (code, only_run(&out), all)
}

fn run(_: &Scene, config: &Path, key: &str, env: &[(&'static str, String)]) -> (i32, std::process::Output, String) {
    let c = config.display().to_string();
    let (out, _) = drcheck(&["--config", &c, "verify", "--backup", key, "--target", "orders", "--json"], env, LIMIT);
    let all = format!("{}\n{}", stdout(&out), stderr(&out));
    (out.status.code().unwrap_or(-1), out, all)
}

/// A configuration error (exit 2): no run, one line on stderr.
fn config_error(scene: &Scene, config: &Path, key: &str, env: &[(&'static str, String)]) -> String {
    let (code, out, all) = run(scene, config, key, env);
    assert_eq!(code, 2, "{key}: {all}");
    let err = stderr(&out);
    assert!(err.lines().count() <= 2, "one line naming the fix: {err}");
    err
}

/// Every secret the test holds, none of which may appear in any output.
fn secrets(k: &Keys) -> Vec<String> {
    let mut s: Vec<String> = [AGE_PASS, GPG_PASS].iter().map(|s| s.to_string()).collect();
    for id in [&k.age_identity, &k.other_identity] {
        s.extend(id.lines().filter(|l| l.starts_with("AGE-SECRET-KEY-1")).map(str::to_string));
    }
    // A line from the middle of each armoured secret key.
    for key in [&k.gpg_secret, &k.other_gpg_secret] {
        let lines: Vec<&str> = key.lines().filter(|l| l.len() > 40).collect();
        s.push(lines[lines.len() / 2].to_string());
    }
    s
}

fn assert_no_secret(k: &Keys, text: &str) {
    for s in secrets(k) {
        assert!(!text.contains(&s), "a secret appears in the output: {text}");
    }
}

/// Watches every process's command line and environment (but drcheck's own, which holds
/// the config's `${VAR}`s) while a run goes, for the secrets.
struct Watch {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl Watch {
    fn start(secrets: Vec<String>) -> Watch {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut looked = 0;
            while !s.load(Ordering::Relaxed) {
                for p in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
                    let Ok(pid) = p.file_name().to_string_lossy().parse::<u32>() else { continue };
                    let cmdline = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
                    let name = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                    if name.contains("target/") && name.contains("drcheck --config") {
                        continue; // drcheck itself: its environment is where the secrets come from.
                    }
                    // drcheck itself or a child of it between fork and exec (its memory still
                    // drcheck's, its command line not readable for that instant): what a
                    // child is handed is its environment after exec, which this still sees.
                    let exe = std::fs::read_link(p.path().join("exe")).unwrap_or_default();
                    if name.is_empty() && exe.to_string_lossy().contains("target/") && exe.ends_with("drcheck") {
                        continue;
                    }
                    let environ = std::fs::read(p.path().join("environ")).unwrap_or_default();
                    let environ = String::from_utf8_lossy(&environ).replace('\0', " ");
                    for secret in &secrets {
                        if name.contains(secret.as_str()) || environ.contains(secret.as_str()) {
                            seen.push(format!("pid {pid}: {name}"));
                        }
                    }
                    if name.contains("gpg") {
                        looked += 1;
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if looked == 0 {
                seen.push("never saw a gpg process: the watch looked at nothing".into());
            }
            seen
        });
        Watch { stop, handle: Some(handle) }
    }

    fn finish(mut self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().unwrap()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Each format × each kind of key, made the way backup scripts make them, restores and
/// passes; the report names the encryption and the key that opened it.
#[test]
fn encrypted_backups_of_every_format_restore_with_the_keys_kept() {
    let scene = Scene::start();
    let dir = scene.root.path();
    let keys = make_keys(dir);
    let p = |n: &str| dir.join(n).display().to_string();
    let (sock, port) = (scene.primary.sock.display().to_string(), scene.primary.port.to_string());
    let pg = format!("-h {sock} -p {port} -U postgres");
    let ops = &keys._homes[0];
    let gpg_pass_file = dir.join("gpg.pass");
    std::fs::write(&gpg_pass_file, GPG_PASS).unwrap();
    let r = &keys.age_recipient;

    sh(&format!("pg_dump {pg} -Fc orders | age -r {r} > {}", p("custom.dump.age")));
    sh(&format!("pg_dump {pg} -Fp orders | gzip | age -a -r {r} > {}", p("plain.sql.gz.age")));
    sh(&format!("pg_dump {pg} -Ft orders | zstd -q | age -r {r} > {}", p("dump.tar.zst.age")));
    sh(&format!("pg_dump {pg} -Fc orders > {}", p("raw.dump")));
    age_passphrase_encrypt(&dir.join("raw.dump"), &dir.join("pass.dump.age"));
    sh(&format!(
        "pg_dump {pg} -Fp orders | gzip | gpg --batch --pinentry-mode loopback --passphrase-file {} --symmetric > {}",
        gpg_pass_file.display(),
        p("plain.sql.gz.gpg")
    ));
    ops.gpg(&format!("--trust-model always -e -r ops@example.com -o {} {}", p("custom.dump.gpg"), p("raw.dump")));
    sh(&format!(
        "pg_dump {pg} -Fd -f {} orders && tar -C {} -cf - dirdump > {}",
        p("dirdump"),
        dir.display(),
        p("dir.tar")
    ));
    ops.gpg(&format!("--trust-model always -a -e -r ops@example.com -o {} {}", p("dir.tar.asc"), p("dir.tar")));
    // A base backup, one tar with its WAL, encrypted on its way out.
    sh(&format!("pg_basebackup {pg} -D - -Ft -X fetch --checkpoint=fast | age -r {r} > {}", p("basebackup.tar.age")));

    let cases: [(&str, &str, &str, &str); 9] = [
        ("custom.dump.age", "custom+age", "age", "age identity of recipient"),
        ("plain.sql.gz.age", "plain+gzip+age", "age", "age identity of recipient"),
        ("dump.tar.zst.age", "tar+zstd+age", "age", "age identity of recipient"),
        ("pass.dump.age", "custom+age", "age", "age passphrase"),
        ("plain.sql.gz.gpg", "plain+gzip+openpgp", "openpgp", "OpenPGP passphrase"),
        ("custom.dump.gpg", "custom+openpgp", "openpgp", "OpenPGP secret key"),
        ("dir.tar.asc", "directory+openpgp", "openpgp", "OpenPGP secret key"),
        ("basebackup.tar.age", "physical+age", "age", "age identity of recipient"),
        ("raw.dump", "custom", "", ""),
    ];
    for (file, ..) in &cases {
        scene.s3.upload(&dir.join(file), &scene.bucket, &format!("orders/{file}"));
    }
    let mut spec = scene.spec();
    spec.extra_target = DECRYPT.into();
    let config = scene.config(&spec);
    let env = env(&scene, &keys.age_identity, &keys.gpg_secret, GPG_PASS);
    for (file, format, encryption, by) in cases {
        let watch = file.ends_with(".gpg").then(|| Watch::start(secrets(&keys)));
        let (code, run, all) = verify(&scene, &config, &format!("orders/{file}"), &env);
        if let Some(w) = watch {
            let seen = w.finish();
            assert!(seen.is_empty(), "{file}: a secret on a command line or in an environment: {seen:?}");
        }
        assert_eq!(code, 0, "{file}: {run}\n{all}");
        assert_eq!(run["backup"]["format"], format, "{file}: {run}");
        if encryption.is_empty() {
            assert!(run["backup"].get("encryption").is_none() && run["restore"].get("decrypted_by").is_none(), "{run}");
        } else {
            assert_eq!(run["backup"]["encryption"], encryption, "{file}: {run}");
            let d = run["restore"]["decrypted_by"].as_str().unwrap_or_default();
            assert!(d.starts_with(by), "{file}: decrypted_by {d:?}");
            if by.starts_with("age identity") {
                assert!(d.contains(r.as_str()), "{file}: names the recipient: {d}");
            }
            if by.starts_with("OpenPGP secret key") {
                assert!(d.contains(&keys.gpg_fpr), "{file}: names the key's fingerprint: {d}");
            }
        }
        if !file.starts_with("basebackup") {
            assert_all_validators_pass(&run);
        }
        assert_no_secret(&keys, &all);
    }
    // Nothing of gpg is left behind: no agent, no home.
    std::thread::sleep(Duration::from_millis(1500));
    let scratch = scene.scratch.display().to_string();
    let agents = sh(&format!("ps -eo pid,stat,args | grep '[g]pg-agent' | grep -v ' Z' | grep -F '{scratch}' || true"));
    assert!(agents.trim().is_empty(), "a gpg-agent outlived its run: {agents}");
    assert!(scene.leftover_sandboxes().is_empty(), "{:?}", scene.leftover_sandboxes());
}

/// No key for it: exit 2 naming what the backup needs and the key to set. The wrong
/// key: failed (exit 1) naming the recipient or key the backup needs and the one held.
/// One altered byte: exit 1.
#[test]
fn missing_wrong_keys_and_altered_bytes_get_the_verdict_they_deserve() {
    let scene = Scene::start();
    let dir = scene.root.path();
    let keys = make_keys(dir);
    let p = |n: &str| dir.join(n).display().to_string();
    let raw = scene.dump.display().to_string();
    let ops = &keys._homes[0];
    let gpg_pass_file = dir.join("gpg.pass");
    std::fs::write(&gpg_pass_file, GPG_PASS).unwrap();
    sh(&format!("age -r {} -o {} {raw}", keys.age_recipient, p("a.dump.age")));
    ops.gpg(&format!("--trust-model always -e -r ops@example.com -o {} {raw}", p("a.dump.gpg")));
    sh(&format!(
        "gpg --batch --pinentry-mode loopback --passphrase-file {} --symmetric -o {} {raw}",
        gpg_pass_file.display(),
        p("s.dump.gpg")
    ));
    // One flipped byte in the middle of each ciphertext.
    for f in ["a.dump.age", "a.dump.gpg"] {
        let mut b = std::fs::read(dir.join(f)).unwrap();
        let mid = b.len() / 2;
        b[mid] ^= 0x01;
        std::fs::write(dir.join(format!("flipped-{f}")), b).unwrap();
    }
    // Issue 34: signed, not encrypted — binary (it read as "not a PostgreSQL backup") and
    // armoured (it asked for a passphrase that was set).
    ops.gpg(&format!("--passphrase '{GPG_PASS}' -s -o {} {raw}", p("signed.dump.gpg")));
    ops.gpg(&format!("--passphrase '{GPG_PASS}' -a -s -o {} {raw}", p("signed.dump.asc")));
    // Issue 48: signed by another key, and a signed message altered after signing.
    keys._homes[1].gpg(&format!("--passphrase '{GPG_PASS}' -s -o {} {raw}", p("other-signed.dump.gpg")));
    let mut b = std::fs::read(dir.join("signed.dump.gpg")).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0x01;
    std::fs::write(dir.join("altered-signed.dump.gpg"), b).unwrap();
    let signer = ops.gpg("--armor --export ops@example.com");
    for f in ["other-signed.dump.gpg", "altered-signed.dump.gpg"] {
        scene.s3.upload(&dir.join(f), &scene.bucket, &format!("orders/{f}"));
    }
    for f in [
        "a.dump.age",
        "a.dump.gpg",
        "s.dump.gpg",
        "flipped-a.dump.age",
        "flipped-a.dump.gpg",
        "signed.dump.gpg",
        "signed.dump.asc",
    ] {
        scene.s3.upload(&dir.join(f), &scene.bucket, &format!("orders/{f}"));
    }
    let bare = scene.config(&scene.spec());
    let mut spec = scene.spec();
    spec.extra_target = DECRYPT.into();
    let with_keys = scene.config(&spec);
    let right = env(&scene, &keys.age_identity, &keys.gpg_secret, GPG_PASS);
    let wrong = env(&scene, &keys.other_identity, &keys.other_gpg_secret, "not the passphrase");
    let mut outputs = String::new();

    // No key configured.
    let msg = config_error(&scene, &bare, "orders/a.dump.age", &scene.env());
    assert!(msg.contains("age") && msg.contains("X25519") && msg.contains("decrypt.age_identity"), "{msg}");
    outputs += &msg;
    let msg = config_error(&scene, &bare, "orders/a.dump.gpg", &scene.env());
    assert!(msg.contains(&keys.gpg_subkey) && msg.contains("decrypt.gpg_secret_key"), "{msg}");
    outputs += &msg;
    let msg = config_error(&scene, &bare, "orders/s.dump.gpg", &scene.env());
    assert!(msg.contains("passphrase") && msg.contains("decrypt.gpg_passphrase"), "{msg}");
    outputs += &msg;

    // The wrong key.
    let (code, run, all) = verify(&scene, &with_keys, "orders/a.dump.age", &wrong);
    let msg = run["error"]["message"].as_str().unwrap_or_default().to_string();
    assert_eq!((code, run["result"].as_str()), (1, Some("failed")), "{run}\n{all}");
    assert!(msg.contains(&keys.other_recipient) && msg.contains("could not be restored"), "{msg}");
    outputs += &all;
    let (code, run, all) = verify(&scene, &with_keys, "orders/a.dump.gpg", &wrong);
    let msg = run["error"]["message"].as_str().unwrap_or_default().to_string();
    assert_eq!((code, run["result"].as_str()), (1, Some("failed")), "{run}\n{all}");
    assert!(msg.contains(&keys.gpg_subkey) && msg.contains(&keys.other_gpg_subkey), "needed and held: {msg}");
    outputs += &all;
    let (code, run, all) = verify(&scene, &with_keys, "orders/s.dump.gpg", &wrong);
    let msg = run["error"]["message"].as_str().unwrap_or_default().to_string();
    assert_eq!((code, run["result"].as_str()), (1, Some("failed")), "{run}\n{all}");
    assert!(msg.contains("decrypt.gpg_passphrase") && msg.contains("does not open"), "{msg}");
    outputs += &all;

    // Signed only (issue 48): without decrypt.signed_by, the key to set (exit 2); with
    // it, unwrapped by gpg once the signature verifies — binary and armoured — and
    // restored (exit 0); signed by another key, or altered after signing: the backup's
    // (exit 1).
    for f in ["signed.dump.gpg", "signed.dump.asc"] {
        let msg = config_error(&scene, &with_keys, &format!("orders/{f}"), &right);
        assert!(msg.contains("signed, not encrypted") && msg.contains("decrypt.signed_by"), "{f}: {msg}");
        outputs += &msg;
    }
    let mut spec = scene.spec();
    spec.extra_target = format!("{DECRYPT}signed_by = \"${{GPG_SIGNED_BY}}\"\n");
    let with_signer = scene.config(&spec);
    let mut signed_env = right.clone();
    signed_env.push(("GPG_SIGNED_BY", signer.clone()));
    for f in ["signed.dump.gpg", "signed.dump.asc"] {
        let (code, run, all) = verify(&scene, &with_signer, &format!("orders/{f}"), &signed_env);
        assert_eq!(code, 0, "{f}: {run}\n{all}");
        let by = run["restore"]["decrypted_by"].as_str().unwrap_or_default();
        assert!(by.contains("signature of key") && by.contains(&keys.gpg_fpr), "{f}: {run}");
        outputs += &all;
    }
    let (code, run, all) = verify(&scene, &with_signer, "orders/other-signed.dump.gpg", &signed_env);
    assert_eq!((code, run["result"].as_str()), (1, Some("failed")), "{run}\n{all}");
    let msg = run["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("signature does not hold") && msg.contains("not decrypt.signed_by"), "{msg}");
    let (code, run, all) = verify(&scene, &with_signer, "orders/altered-signed.dump.gpg", &signed_env);
    assert_eq!((code, run["result"].as_str()), (1, Some("failed")), "{run}\n{all}");
    outputs += &all;

    // One flipped byte: the backup's fault.
    for f in ["flipped-a.dump.age", "flipped-a.dump.gpg"] {
        let (code, run, all) = verify(&scene, &with_keys, &format!("orders/{f}"), &right);
        assert_eq!((code, run["result"].as_str()), (1, Some("failed")), "{f}: {run}\n{all}");
        let msg = run["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains("altered") || msg.contains("corrupt"), "{f}: {msg}");
        outputs += &all;
    }
    // The right keys open both (the fixtures are good).
    for f in ["a.dump.age", "a.dump.gpg", "s.dump.gpg"] {
        let (code, run, all) = verify(&scene, &with_keys, &format!("orders/{f}"), &right);
        assert_eq!(code, 0, "{f}: {run}\n{all}");
        outputs += &all;
    }
    assert_no_secret(&keys, &outputs);
    // Nor in the history drcheck keeps.
    let history = std::fs::read(dir.join("history.db")).unwrap_or_default();
    assert_no_secret(&keys, &String::from_utf8_lossy(&history));
}

/// The attack: a plain dump, encrypted to the ops key, whose SQL (run as the restore's
/// superuser, while gpg is still decrypting the rest of it) finds gpg's home from its own
/// data directory and reads every file beneath it — the imported secret key among them.
/// The defence: gpg's home lies beside the run's directory, outside what the restore
/// server may open (Landlock). The benign twin runs the same reader on the run's own
/// directory and is caught reading — so the payload works, and only the home's place
/// stops it.
#[test]
fn a_backup_cannot_read_the_key_that_decrypts_it() {
    let scene = Scene::start();
    let dir = scene.root.path();
    let keys = make_keys(dir);
    let ops = &keys._homes[0];
    let payload = |target: &str, depth: u32| {
        format!(
            r#"CREATE FUNCTION slurp(p text, depth int) RETURNS text LANGUAGE plpgsql AS $f$
DECLARE e text; got text := '';
BEGIN
  FOR e IN SELECT pg_ls_dir(p) LOOP
    IF (pg_stat_file(p || '/' || e)).isdir THEN
      IF depth > 0 THEN got := got || slurp(p || '/' || e, depth - 1); END IF;
    ELSE
      BEGIN got := got || pg_read_file(p || '/' || e); EXCEPTION WHEN others THEN NULL; END;
    END IF;
  END LOOP;
  RETURN got;
END $f$;
DO $$
DECLARE
  data text := current_setting('data_directory');
  run text := regexp_replace(data, '^.*/(sandbox-[^/]+)/data$', '\1');
  keys text := regexp_replace(data, '/sandbox-[^/]+/data$', '') || '/k-' || substr(encode(sha256(convert_to(run, 'UTF8')), 'hex'), 1, 12);
  target text := {target};
  got text := '';
BEGIN
  PERFORM pg_stat_file(target);  -- it exists now: reading a missing one proves nothing
  BEGIN
    got := slurp(target, {depth});
  EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'denied: %', SQLERRM;
  END;
  IF got <> '' THEN RAISE EXCEPTION 'LEAKED % bytes from %', length(got), target; END IF;
END $$;
DROP FUNCTION slurp(text, int);
"#
        )
    };
    // Enough data after the payload that gpg is still at work (its home in place) when
    // psql runs it.
    let filler: String = (0..60_000).map(|i: u64| format!("{i}\t{:x}{:x}\n", i * 7919, i * 104_729)).collect();
    let make = |name: &str, target: &str, depth: u32| {
        let sql = format!(
            "{}\ncreate table filler (id int, t text);\ncopy filler from stdin;\n{filler}\\.\n",
            payload(target, depth)
        );
        let plain = dir.join(format!("{name}.sql"));
        std::fs::write(&plain, sql).unwrap();
        let encrypted = dir.join(format!("{name}.sql.gpg"));
        ops.gpg(&format!("--trust-model always -e -r ops@example.com -o {} {}", encrypted.display(), plain.display()));
        scene.s3.upload(&encrypted, &scene.bucket, &format!("orders/{name}.sql.gpg"));
    };
    // gpg's home: `k-…/g-…/private-keys-v1.d/<keygrip>.key`, three levels down.
    make("attack", "keys", 3);
    // The twin: the run's own directory (its data directory's files, one level down).
    make("twin", "regexp_replace(data, '/data$', '')", 1);
    let mut spec = scene.spec();
    // Self-checks only: the dumps are not the primary's database.
    spec.extra_target = format!("[target.validators]\nenabled = [\"amcheck\"]\n{DECRYPT}");
    let c = scene.config(&spec).display().to_string();
    let env = env(&scene, &keys.age_identity, &keys.gpg_secret, GPG_PASS);
    let verify = |key: &str| {
        let (out, _) =
            drcheck(&["--config", &c, "verify", "--backup", key, "--target", "orders", "--json"], &env, LIMIT);
        let all = format!("{}\n{}", stdout(&out), stderr(&out));
        (only_run(&out), all)
    };

    let (run, all) = verify("orders/attack.sql.gpg");
    assert!(!all.contains("LEAKED"), "the backup read gpg's home: {all}");
    assert!(!all.contains("could not stat"), "gpg's home was already gone: the attack proved nothing: {all}");
    assert_eq!(run["result"], "passed", "{run}\n{all}");
    assert_eq!(run["backup"]["format"], "plain+openpgp", "{run}");
    assert_no_secret(&keys, &all);

    let (run, all) = verify("orders/twin.sql.gpg");
    assert_eq!(run["result"], "failed", "{run}");
    assert!(all.contains("LEAKED"), "the twin's payload read nothing: it would prove nothing: {all}");
}
