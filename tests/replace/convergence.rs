//! Many processes starting together with new definitions converge on one file.

use super::*;

/// 16 processes start at once with definitions the file does not hold: all succeed, on one
/// file, with one outcome.
fn race(new_layout: bool) {
    let _g = fork_lock();
    let (_dir, path) = temp_path("race.shm");
    let old = Limiter::builder()
        .limit("api", bucket(200, 20))
        .create_or_open(&path)
        .unwrap();
    let results = fork_workers(16, |_| {
        let mut b = Limiter::builder().limit("api", bucket(300, 30));
        if new_layout {
            b = b.limit("extra", FixedWindow::new(5, Duration::from_secs(1)));
        }
        let l = b
            .on_conflict(OnConflict::Adopt)
            .create_or_open(&path)
            .unwrap();
        let live = l.limit("api").unwrap().live_algorithm().unwrap();
        vec![
            l.file_info().file_id,
            live.capacity(),
            l.definitions().len() as u64,
        ]
    });
    let ids: std::collections::BTreeSet<u64> = results.iter().map(|r| r[0]).collect();
    assert_eq!(ids.len(), 1, "all 16 on one file: {results:?}");
    let final_id = Limiter::open(&path).unwrap().file_info().file_id;
    assert_eq!(ids.into_iter().next(), Some(final_id));
    assert_eq!(
        final_id != old.file_info().file_id,
        new_layout,
        "replaced only for a new layout"
    );
    for r in &results {
        assert_eq!(r[1], 30);
        assert_eq!(r[2], if new_layout { 2 } else { 1 });
    }
    let names = fs::read_dir(path.parent().unwrap()).unwrap().count();
    assert_eq!(names, 1, "no temporary files left");
}

#[test]
fn sixteen_processes_adopting_a_retune_agree() {
    race(false);
}

#[test]
fn sixteen_processes_adopting_a_new_layout_converge_on_one_file() {
    race(true);
}

#[test]
fn sixteen_processes_with_equal_definitions_all_succeed() {
    let _g = fork_lock();
    let (_dir, path) = temp_path("equal.shm");
    let results = fork_workers(16, |_| {
        let l = Limiter::builder()
            .limit("api", bucket(300, 30))
            .create_or_open(&path)
            .unwrap();
        vec![l.file_info().file_id]
    });
    let ids: std::collections::BTreeSet<u64> = results.iter().map(|r| r[0]).collect();
    assert_eq!(ids.len(), 1);
}
