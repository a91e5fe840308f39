//! Test helper: spawns `sleep 600` through the harness, prints its pid, then waits
//! forever. The `children_die_with_the_test_process` test SIGKILLs this process and
//! checks that the sleep dies with it.

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cmd = std::process::Command::new("sleep");
    cmd.arg("600");
    let p = qdr_tests::Process::spawn("sleep", cmd, &dir.path().join("sleep.log")).expect("spawn sleep");
    println!("{}", p.pid());
    std::thread::sleep(std::time::Duration::from_secs(600));
}
