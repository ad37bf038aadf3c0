//! The throwaway PostgreSQL: a real server, a database per test, a crash and a restart that
//! keep committed data.

use pith_testkit::postgres::PgServer;

#[test]
fn a_real_server_gives_each_test_its_own_database_and_survives_a_crash() {
    let pg = PgServer::shared();
    let a = pg.database().unwrap();
    let b = pg.database().unwrap();
    assert_ne!(a, b);
    let db = a.rsplit('/').next().unwrap();
    let version = pg.psql(db, "SHOW server_version_num").unwrap();
    assert!(
        version.trim().parse::<u32>().unwrap() >= 130_000,
        "{version}"
    );
    pg.psql(db, "CREATE TABLE t (n int); INSERT INTO t VALUES (7)")
        .unwrap();

    pg.kill().unwrap();
    let refused = pg.psql(db, "SELECT 1").unwrap_err().to_string();
    assert!(refused.contains("psql failed"), "{refused}");
    pg.start_again().unwrap();
    assert_eq!(pg.psql(db, "SELECT n FROM t").unwrap().trim(), "7");
    // Other databases are other worlds.
    let other = b.rsplit('/').next().unwrap();
    assert!(pg.psql(other, "SELECT n FROM t").is_err());
}
