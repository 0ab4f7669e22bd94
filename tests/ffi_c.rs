//! The C ABI used from real C programs: `ffi/tests/*.c` and `ffi/examples/worker.c` are compiled
//! here with gcc (strict C99, and as C++) against the `libshmlimit` cargo built for this test,
//! then run against files in a temporary directory: error paths, the later calls (definition
//! options, refunds, retuning, composed checks, keys, permits, waits), threads, forked workers,
//! composed checks across processes and permits of killed holders.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::cbuild::{c_program, check_shared_bucket, compile, lib_dir, Link, RustWorker, STRICT};
use common::root;
use shmlimit::{Clock, Limiter, MonotonicClock, Rate, TokenBucket};

fn run(program: &Path, args: &[&std::ffi::OsStr]) -> Output {
    run_with(program, args, &[])
}

fn run_with(program: &Path, args: &[&std::ffi::OsStr], env: &[(&str, &str)]) -> Output {
    let output = c_program(program)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()));
    println!("{}", String::from_utf8_lossy(&output.stdout));
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        output.status.success(),
        "{} failed ({}):\n{}{}",
        program.display(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Build a C test program from `ffi/tests/NAME.c` and run it with a fresh directory.
fn build_and_run(name: &str, compiler: &str, lang: &[&str], link: Link) -> String {
    build_and_run_with(name, compiler, lang, link, &[])
}

/// Build `ffi/tests/NAME.c` (C99, shared library) and run it with a fresh directory and `args`.
fn build_and_run_args(name: &str, args: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = dir.path().join(name);
    compile(
        "gcc",
        &["-std=c99"],
        &root().join(format!("ffi/tests/{name}.c")),
        &exe,
        Link::Shared,
    );
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("work dir");
    let mut all: Vec<&std::ffi::OsStr> = vec![work.as_os_str()];
    all.extend(args.iter().map(std::ffi::OsStr::new));
    let output = run(&exe, &all);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// [`build_and_run`] with extra environment variables for the program.
fn build_and_run_with(
    name: &str,
    compiler: &str,
    lang: &[&str],
    link: Link,
    env: &[(&str, &str)],
) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = dir.path().join(name);
    compile(
        compiler,
        lang,
        &root().join(format!("ffi/tests/{name}.c")),
        &exe,
        link,
    );
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("work dir");
    let output = run_with(&exe, &[work.as_os_str()], env);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn c_error_paths_return_their_codes_and_messages() {
    let out = build_and_run(
        "errors",
        "gcc",
        &["-std=c99", "-D_POSIX_C_SOURCE=200809L"],
        Link::Shared,
    );
    assert!(out.contains(" passed, 0 failed"), "{out}");
}

#[test]
fn header_compiles_and_runs_as_cxx() {
    let out = build_and_run("errors", "g++", &["-x", "c++", "-std=c++11"], Link::Shared);
    assert!(out.contains(" passed, 0 failed"), "{out}");
}

/// AddressSanitizer, UndefinedBehaviorSanitizer and LeakSanitizer on the C side: a handle the
/// ABI leaks, or a write past an out-parameter, fails the run.
const SANITIZE: &[&str] = &[
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=undefined",
    "-fno-omit-frame-pointer",
];

#[test]
fn c_error_paths_are_clean_under_sanitizers() {
    let flags = [&["-std=c99", "-D_POSIX_C_SOURCE=200809L"], SANITIZE].concat();
    let out = build_and_run("errors", "gcc", &flags, Link::Shared);
    assert!(out.contains(" passed, 0 failed"), "{out}");
}

/// The programs of the C ABI's later calls (ffi/tests/NAME.c, with feature_helpers.h): rate
/// limits, concurrency, and what comes around decisions.
const FEATURES: [&str; 5] = [
    "features",
    "concurrency",
    "lifecycle",
    "adaptive",
    "keyed_adaptive",
];

#[test]
fn c_later_calls_succeed_and_fail_with_their_codes() {
    for name in FEATURES {
        let out = build_and_run(
            name,
            "gcc",
            &["-std=c99", "-D_POSIX_C_SOURCE=200809L"],
            Link::Shared,
        );
        assert!(out.contains(" passed, 0 failed"), "{name}: {out}");
    }
}

#[test]
fn later_calls_compile_and_run_as_cxx() {
    for name in FEATURES {
        let out = build_and_run(name, "g++", &["-x", "c++", "-std=c++11"], Link::Shared);
        assert!(out.contains(" passed, 0 failed"), "{name}: {out}");
    }
}

/// The later calls under ASan and UBSan; leaks are checked by the next test.
#[test]
fn later_calls_are_clean_under_sanitizers() {
    let flags = [&["-std=c99", "-D_POSIX_C_SOURCE=200809L"], SANITIZE].concat();
    for name in FEATURES {
        let out = build_and_run_with(
            name,
            "gcc",
            &flags,
            Link::Shared,
            &[("ASAN_OPTIONS", "detect_leaks=0")],
        );
        assert!(out.contains(" passed, 0 failed"), "{name}: {out}");
    }
}

/// Every later call under LeakSanitizer: nothing leaks, permits handed to C by id included
/// (`Permit::into_id` once forgot its `Limit`, an `Arc` of the mapping).
#[test]
fn later_calls_leak_nothing() {
    let flags = [&["-std=c99", "-D_POSIX_C_SOURCE=200809L"], SANITIZE].concat();
    for name in FEATURES {
        let out = build_and_run(name, "gcc", &flags, Link::Shared);
        assert!(out.contains(" passed, 0 failed"), "{name}: {out}");
    }
}

#[test]
fn threads_share_one_handle_and_keep_their_own_errors() {
    let flags = [&["-std=c99", "-pthread"], SANITIZE].concat();
    let out = build_and_run("threads", "gcc", &flags, Link::Shared);
    assert!(out.contains("threads: allowed=1000 denied=1400"), "{out}");
}

#[test]
fn eight_forked_c_workers_respect_the_bound() {
    let out = build_and_run("fork_bound", "gcc", &["-std=c99"], Link::Shared);
    assert!(
        out.contains("fixed: 8 workers x 400 attempts: allowed=1000 "),
        "{out}"
    );
}

/// Eight forked C workers compose [token bucket of 5000 (cost 2), token bucket of 1000,
/// fixed window of 3000] until the middle one is drained, refunding every tenth grant: the
/// limits before and after it end with exactly the net grants taken (a denied composed request
/// consumed nothing anywhere), and every outcome is consistent.
#[test]
fn composed_checks_across_c_processes_take_nothing_when_denied() {
    let out = build_and_run_args("compose_fork", &["bucket"]);
    assert!(out.contains("compose (first=bucket): ok"), "{out}");
    assert!(
        out.contains(" net=1000 inconsistent=0 left: first=3000 bucket=0 window=2000"),
        "{out}"
    );
}

/// The same with a sliding log of 5000 first. Fails now and then: see the next test.
#[test]
#[ignore = "known limit of the log ring (docs/guarantees.md, sliding log row): units of a cost > 1 freed behind live entries stay unusable for up to W; stricter, never looser"]
fn composed_checks_with_a_log_first_take_nothing_when_denied() {
    let out = build_and_run_args("compose_fork", &["log"]);
    assert!(out.contains("compose (first=log): ok"), "{out}");
}

/// Composed checks with keyed limits (a key per `shmlimit_check`): a per-client keyed bucket
/// and a global one decided in one call, in one process (which limit denies, refunds by key,
/// errors) and from four forked C workers for eight clients (the global bucket admits exactly
/// its burst, no client more than its own, a denial takes nothing from a client).
#[test]
fn composed_checks_with_keyed_limits_from_c() {
    let out = build_and_run_args("compose_keyed", &[]);
    assert!(out.contains("compose keyed: ok"), "{out}");
}

/// Reproducer: eight processes acquiring 2 entries of a sliding log of 1000 and refunding them
/// at once see denials (at most 16 entries are ever held), and after every refund entries are
/// missing; one process alone sees neither.
#[test]
#[ignore = "known limit of the log ring (docs/guarantees.md, sliding log row): units of a cost > 1 freed behind live entries stay unusable for up to W; stricter, never looser"]
fn sliding_log_refunds_across_processes_lose_nothing() {
    let out = build_and_run_args("log_refunds", &["60000000000", "8", "2"]);
    assert!(out.contains("denials=0 available=1000 of 1000"), "{out}");
}

#[test]
fn sliding_log_refunds_in_one_process_lose_nothing() {
    let out = build_and_run_args("log_refunds", &["60000000000", "1", "2"]);
    assert!(out.contains("denials=0 available=1000 of 1000"), "{out}");
}

/// A C holder of both permits is SIGKILLed: a C waiter blocked in
/// `shmlimit_permit_acquire_timeout` and the test process take its permits over (a live
/// holder's never), and the cleanup pass frees the permits of a killed and reaped holder.
#[test]
fn permits_of_a_killed_c_holder_are_taken_over() {
    let out = build_and_run_args("permit_kill", &[]);
    assert!(out.contains("permits: ok"), "{out}");
}

/// The same with a keyed concurrency limit: every permit is one key's (two per key), and
/// another key's permit, held throughout, is never touched.
#[test]
fn keyed_permits_of_a_killed_c_holder_are_taken_over() {
    let out = build_and_run_args("permit_kill", &["keyed"]);
    assert!(out.contains("keyed permits: ok"), "{out}");
}

#[test]
fn static_library_links_and_works() {
    let out = build_and_run("fork_bound", "gcc", &["-std=c99"], Link::Static);
    assert!(out.contains("allowed=1000 "), "{out}");
}

fn parse_counts(text: &str) -> (u64, u64) {
    let field = |name: &str| -> u64 {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text:?}"))
    };
    (field("allowed="), field("denied="))
}

/// Rust workers (forked from this test) and C worker processes (`ffi/examples/worker.c`) decide
/// on the same file at the same time; their combined admissions respect each bound.
#[test]
fn rust_and_c_workers_share_one_budget() {
    const RUST: usize = 3;
    const C: usize = 3;
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = dir.path().join("worker");
    compile(
        "gcc",
        &["-std=c99"],
        &root().join("ffi/examples/worker.c"),
        &worker,
        Link::Shared,
    );
    let path = dir.path().join("mixed.shm");
    let clock = MonotonicClock;
    let (burst, per_second) = (100u64, 2_000u64);
    let limiter = Limiter::builder()
        // 500 tokens refilled at one per hour: exactly 500 admissions in this test.
        .limit(
            "fixed",
            TokenBucket::new(500, Rate::new(1, Duration::from_secs(3600)).unwrap()),
        )
        .limit("paced", TokenBucket::per_second(per_second).burst(burst))
        .create_or_open(&path)
        .expect("create");

    // "fixed": every worker makes at least 700 attempts, so together they always drain it.
    for (name, run_ms, min_attempts) in [("fixed", 300u64, 700u64), ("paced", 500, 0)] {
        let limit = limiter.token_bucket(name).expect("limit");
        // Everyone starts together once the C workers have had time to attach.
        let start_ns = clock.now_ns() + 300_000_000;
        let until_ns = start_ns + run_ms * 1_000_000;
        let children: Vec<_> = (0..C)
            .map(|_| {
                let (stop, value) = match min_attempts {
                    0 => ("-d", run_ms),
                    n => ("-n", n),
                };
                c_program(&worker)
                    .arg(stop)
                    .arg(value.to_string())
                    .arg("-s")
                    .arg(start_ns.to_string())
                    .arg(&path)
                    .arg(name)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawn the C worker")
            })
            .collect();
        let forked: Vec<_> = (0..RUST)
            .map(|_| RustWorker::fork(&limit, start_ns, until_ns, min_attempts))
            .collect();
        let rust: Vec<(u64, u64)> = forked
            .into_iter()
            .map(|w| w.reap())
            .map(|r| (r.allowed, r.denied))
            .collect();
        let c: Vec<(u64, u64)> = children
            .into_iter()
            .map(|child| {
                let out = child.wait_with_output().expect("wait");
                assert!(
                    out.status.success(),
                    "C worker failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                parse_counts(&String::from_utf8_lossy(&out.stdout))
            })
            .collect();
        // No decision is dated before `start_ns` (every worker waits for it) nor after now.
        let elapsed_ns = clock.now_ns() - start_ns;
        let sum = |v: &[(u64, u64)]| v.iter().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        let (rust_sum, c_sum) = (sum(&rust), sum(&c));
        let allowed = rust_sum.0 + c_sum.0;
        let denied = rust_sum.1 + c_sum.1;
        let stats = limit.stats();
        println!(
            "{name}: Rust allowed {} denied {}, C allowed {} denied {}, stats {stats:?}",
            rust_sum.0, rust_sum.1, c_sum.0, c_sum.1
        );
        assert!(rust_sum.0 + rust_sum.1 > 0 && c_sum.0 + c_sum.1 > 0);
        check_shared_bucket(
            name,
            &stats,
            (allowed, denied),
            elapsed_ns,
            500,
            (burst, per_second),
        );
    }
}

/// Through the ABI itself: after a permit is acquired and released by id and every handle is
/// freed, the file is no longer mapped (`Permit::into_id` once forgot its `Limit`, an `Arc` of
/// the mapping, which kept it mapped for the life of the process).
#[test]
fn permit_ids_keep_no_mapping_alive() {
    use shmlimit_ffi::{self as ffi, shmlimit_status::SHMLIMIT_OK};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("leak.shm");
    let _created = Limiter::builder()
        .limit("pool", shmlimit::Concurrency::new(1))
        .create_or_open(&path)
        .expect("create");
    drop(_created);
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let mapped = || {
        std::fs::read_to_string("/proc/self/maps")
            .expect("maps")
            .contains(path.to_str().unwrap())
    };
    let mut limiter = std::ptr::null_mut();
    let mut limit = std::ptr::null_mut();
    let (mut id, mut released) = (0u64, false);
    // SAFETY: valid NUL-terminated strings and out-pointers to live locals; every handle is
    // freed exactly once.
    unsafe {
        // The control: without a permit, freeing the handles unmaps the file.
        assert_eq!(
            ffi::shmlimit_limiter_open(c_path.as_ptr(), std::ptr::null(), &mut limiter),
            SHMLIMIT_OK
        );
        assert_eq!(
            ffi::shmlimit_limiter_limit(limiter, c"pool".as_ptr(), &mut limit),
            SHMLIMIT_OK
        );
        assert!(mapped());
        ffi::shmlimit_limit_free(limit);
        ffi::shmlimit_limiter_free(limiter);
    }
    assert!(!mapped(), "control: freeing the handles unmaps the file");
    // SAFETY: as above.
    unsafe {
        assert_eq!(
            ffi::shmlimit_limiter_open(c_path.as_ptr(), std::ptr::null(), &mut limiter),
            SHMLIMIT_OK
        );
        assert_eq!(
            ffi::shmlimit_limiter_limit(limiter, c"pool".as_ptr(), &mut limit),
            SHMLIMIT_OK
        );
        assert_eq!(
            ffi::permit::shmlimit_permit_acquire(limit, &mut id),
            SHMLIMIT_OK
        );
        assert_ne!(id, 0);
        assert_eq!(
            ffi::permit::shmlimit_permit_release(limit, id, &mut released),
            SHMLIMIT_OK
        );
        assert!(released);
        ffi::shmlimit_limit_free(limit);
        ffi::shmlimit_limiter_free(limiter);
    }
    assert!(
        !mapped(),
        "the file is still mapped after every handle was freed"
    );
}

/// Reproducer, through the ABI: a split token bucket of 8 (4 sub-buckets, one token an hour)
/// must admit at most 8 however they are taken. `Limit::reserve` books on sub-bucket 0's word
/// with the whole bucket's parameters (emission `T`, tolerance `8 T`) instead of the
/// sub-bucket's (`4 T`, `2 * 4 T`), so 8 reservations pass and 6 acquisitions after them: 14.
/// `Limit::reserve` refuses split buckets (`WrongKind`): their sub-buckets have no single order.
#[test]
fn reservations_on_a_split_bucket_respect_its_capacity() {
    use shmlimit_ffi::{
        self as ffi, shmlimit_status::SHMLIMIT_OK, shmlimit_status::SHMLIMIT_WRONG_KIND,
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("split.shm");
    let hour = Rate::new(1, Duration::from_secs(3600)).unwrap();
    let limiter = Limiter::builder()
        .define(
            shmlimit::LimitDef::new(
                "hot",
                shmlimit::IntoAlgorithm::into_algorithm(TokenBucket::new(8, hour), "hot").unwrap(),
            )
            .split(4),
        )
        .create_or_open(&path)
        .expect("create");
    let rust = limiter.token_bucket("hot").expect("hot");
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let (mut handle, mut limit) = (std::ptr::null_mut(), std::ptr::null_mut());
    let mut admitted = 0;
    // SAFETY: valid strings and out-pointers to live locals; every handle is freed once.
    unsafe {
        assert_eq!(
            ffi::shmlimit_limiter_open(c_path.as_ptr(), std::ptr::null(), &mut handle),
            SHMLIMIT_OK
        );
        assert_eq!(
            ffi::shmlimit_limiter_limit(handle, c"hot".as_ptr(), &mut limit),
            SHMLIMIT_OK
        );
        // A split bucket has no single booking order: reservations are refused as a wrong kind
        // (acquire_timeout waits by retrying instead), and take nothing.
        let mut booking = std::mem::zeroed();
        let mut reservation = std::ptr::null_mut();
        assert_eq!(
            ffi::reserve::shmlimit_reserve(limit, 1, 0, &mut booking, &mut reservation),
            SHMLIMIT_WRONG_KIND
        );
        ffi::shmlimit_limit_free(limit);
        ffi::shmlimit_limiter_free(handle);
    }
    while rust.try_acquire(1).expect("acquire").is_allowed() {
        admitted += 1;
    }
    assert!(admitted <= 8, "{admitted} admitted by a bucket of 8");
}

/// `ffi/make-pc.sh` produces a `shmlimit.pc` with which a C program builds and runs.
#[test]
fn pkg_config_file_builds_the_worker() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lib = lib_dir();
    let include = root().join("ffi/include");
    let pc = Command::new("sh")
        .arg(root().join("ffi/make-pc.sh"))
        .arg(root())
        .arg(&lib)
        .arg(&include)
        .output()
        .expect("sh ffi/make-pc.sh");
    assert!(
        pc.status.success(),
        "{}",
        String::from_utf8_lossy(&pc.stderr)
    );
    let text = String::from_utf8(pc.stdout).expect("UTF-8");
    assert!(
        text.contains(&format!("Version: {}", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    std::fs::write(dir.path().join("shmlimit.pc"), &text).expect("write .pc");

    let flags = match Command::new("pkg-config")
        .args(["--cflags", "--libs", "shmlimit"])
        .env("PKG_CONFIG_PATH", dir.path())
        .output()
    {
        Ok(out) => {
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).expect("UTF-8")
        }
        // No pkg-config on this machine: expand the file's variables the same way.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("pkg-config is not installed; expanding shmlimit.pc here");
            expand_pc(&text)
        }
        Err(e) => panic!("pkg-config: {e}"),
    };
    let flags: Vec<&str> = flags.split_whitespace().collect();
    assert!(flags.contains(&"-lshmlimit"), "{flags:?}");
    assert!(
        flags.contains(&format!("-I{}", include.display()).as_str()),
        "{flags:?}"
    );

    let worker = dir.path().join("worker");
    let out = Command::new("gcc")
        .args(["-std=c99"])
        .args(STRICT)
        .arg(root().join("ffi/examples/worker.c"))
        .args(&flags)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(&worker)
        .output()
        .expect("gcc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let path = dir.path().join("pc.shm");
    let _limiter = Limiter::builder()
        .limit(
            "api",
            TokenBucket::new(7, Rate::new(1, Duration::from_secs(3600)).unwrap()),
        )
        .create_or_open(&path)
        .expect("create");
    let out = run(
        &worker,
        &[
            "-n".as_ref(),
            "10".as_ref(),
            path.as_os_str(),
            "api".as_ref(),
        ],
    );
    assert_eq!(parse_counts(&String::from_utf8_lossy(&out.stdout)), (7, 3));
}

/// The `Cflags` and `Libs` of a .pc file with its `${var}` references expanded.
fn expand_pc(text: &str) -> String {
    let mut vars: Vec<(String, String)> = Vec::new();
    let expand = |s: &str, vars: &[(String, String)]| {
        let mut s = s.to_owned();
        for (k, v) in vars.iter().rev() {
            s = s.replace(&format!("${{{k}}}"), v);
        }
        s
    };
    let mut flags = String::new();
    for line in text.lines() {
        if let Some((k, v)) = line.split_once('=') {
            if !k.contains(':') && !k.contains(' ') {
                let v = expand(v.trim(), &vars);
                vars.push((k.trim().to_owned(), v));
                continue;
            }
        }
        for field in ["Cflags:", "Libs:"] {
            if let Some(v) = line.strip_prefix(field) {
                flags.push_str(&expand(v.trim(), &vars));
                flags.push(' ');
            }
        }
    }
    flags
}

/// A fleet-managed bucket's lease through the C header (`shmlimit_limit_fleet_lease`): made
/// fleet-managed and leased here, as the fleet agent does, then read by a C program while the
/// lease runs (decisions use the share) and after it was withdrawn (they use the fence).
#[test]
fn the_fleet_lease_of_a_bucket_is_read_from_c() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = dir.path().join("fleet_lease");
    compile(
        "gcc",
        &["-std=c99"],
        &root().join("ffi/tests/fleet_lease.c"),
        &exe,
        Link::Shared,
    );
    let path = dir.path().join("fleet.shm");
    let limiter = Limiter::builder()
        .limit("share", TokenBucket::per_second(100).burst(50))
        .create_or_open(&path)
        .expect("create");
    let share = limiter.token_bucket("share").expect("a bucket");
    share
        .fleet_manage(5, Rate::per_second(10).expect("a rate"))
        .expect("fleet-managed");
    share
        .set_token_bucket(40, Rate::per_second(80).expect("a rate"))
        .expect("the share");
    let read = |leased: &str, share_capacity: &str, fence_capacity: &str| {
        let args: Vec<&std::ffi::OsStr> = vec![
            path.as_os_str(),
            "share".as_ref(),
            leased.as_ref(),
            share_capacity.as_ref(),
            fence_capacity.as_ref(),
        ];
        String::from_utf8_lossy(&run(&exe, &args).stdout).into_owned()
    };
    // Leased for ten seconds: the share applies.
    let deadline = MonotonicClock.now_ns() + 10_000_000_000;
    share.set_fleet_deadline(deadline).expect("a deadline");
    // (`run` fails the test unless the program's every check passed.)
    let out = read("1", "40", "5");
    assert!(
        out.contains(&format!("leased 1 deadline {deadline}")),
        "{out}"
    );
    // The lease withdrawn (deadline 0, as after a reset): the fence applies.
    share.set_fleet_deadline(0).expect("no deadline");
    let out = read("0", "40", "5");
    assert!(out.contains("managed 1 leased 0 deadline 0 "), "{out}");
}
