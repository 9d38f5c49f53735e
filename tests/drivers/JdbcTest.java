// PgJDBC against a PostgreSQL URL, with prepareThreshold=1 (a PreparedStatement's
// first execution already uses a named server-side statement, S_1, S_2, ...).
//
// usage: java -cp /usr/share/java/postgresql.jar JdbcTest.java URL
//        URL = postgresql://USER:PASS@HOST:PORT/DB?sslmode=disable (converted to jdbc:postgresql)
//
// 8 threads, each its own Connection (see README.md for the workload and checks).
// Exit 0 only if every check held and no statement failed.

import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;

public class JdbcTest {
  static final String DRIVER = "jdbc";
  static final int WORKERS = 8;
  static final int ITERATIONS = Integer.parseInt(System.getenv().getOrDefault("DRV_ITERATIONS", "60"));
  static final int ACCOUNTS = 2 * WORKERS;
  static final long START_BALANCE = 1000;
  static final int REF_ROWS = 50;
  static final long CANCEL_AFTER_MS = 500;
  static final long CANCEL_LIMIT_MS = 1000;
  static final long DEADLINE_MS = 50000;
  static final String[] ZONES = {
    "Asia/Tokyo", "Europe/Paris", "America/New_York", "Australia/Sydney",
    "Africa/Cairo", "America/Sao_Paulo", "Asia/Kolkata", "Pacific/Auckland",
  };
  static final String ACC = "drv_" + DRIVER + "_accounts";
  static final String REF = "drv_" + DRIVER + "_ref";
  // JDBC uses ? placeholders; the texts are otherwise those of the other drivers.
  static final String Q_REF = "SELECT v FROM " + REF + " WHERE k = ?";
  static final String Q_BALANCE = "SELECT balance FROM " + ACC + " WHERE id = ?";
  static final String Q_PAIR = "SELECT sum(balance)::bigint FROM " + ACC + " WHERE id IN (?, ?)";
  static final String Q_CREDIT = "UPDATE " + ACC + " SET balance = balance + ? WHERE id = ?";
  static final String Q_DEBIT = "UPDATE " + ACC + " SET balance = balance - ? WHERE id = ?";
  static final String Q_PROBE_EVEN = "SELECT ?::int * 2 AS v";
  static final String Q_PROBE_ODD = "SELECT ?::int * 3 AS v";

  static String jdbcUrl;
  static Properties props = new Properties();

  // ---- reporting ----
  static int passed = 0, failed = 0, errors = 0;

  static synchronized boolean check(boolean ok, String name, String detail) {
    if (ok) passed++; else failed++;
    System.out.println((ok ? "ok   " : "FAIL ") + DRIVER + ": " + name + (detail.isEmpty() ? "" : " - " + detail));
    return ok;
  }

  static synchronized void error(String where, Throwable e) {
    errors++;
    String code = e instanceof SQLException && ((SQLException) e).getSQLState() != null
        ? " [" + ((SQLException) e).getSQLState() + "]" : "";
    System.out.println("ERROR " + DRIVER + ": " + where + ": " + e.getClass().getSimpleName() + code + ": "
        + e.getMessage());
  }

  static void finish() {
    boolean ok = failed == 0 && errors == 0 && passed > 0;
    System.out.println("SUMMARY " + DRIVER + ": " + (ok ? "PASS" : "FAIL") + " (" + passed + " checks passed, "
        + failed + " failed, " + errors + " errors)");
    System.out.flush();
    Runtime.getRuntime().halt(ok ? 0 : 1);
  }

  static class Stats {
    final int worker;
    volatile int reads, commits, rollbacks, tzChecks, done;
    final List<String> badReads = new ArrayList<>();
    final List<String> badTz = new ArrayList<>();

    Stats(int worker) { this.worker = worker; }

    void badRead(String what, Object got, Object want) {
      badReads.add(what + ": got " + got + ", want " + want);
    }

    void tz(String where, String got, String want) {
      tzChecks++;
      if (!want.equals(got)) badTz.add(where + ": SHOW TimeZone = " + got + ", want " + want);
    }

    void report(String zone) {
      int w = worker;
      check(done == ITERATIONS, "worker " + w + " workload", done + "/" + ITERATIONS + " iterations, " + reads
          + " checked reads, " + commits + " commits, " + rollbacks + " rollbacks");
      check(badReads.isEmpty(), "worker " + w + " read values", badReads.isEmpty() ? reads + " reads as expected"
          : badReads.size() + " wrong: " + String.join("; ", badReads.subList(0, Math.min(5, badReads.size()))));
      check(badTz.isEmpty() && tzChecks >= 5, "worker " + w + " session TimeZone " + zone, badTz.isEmpty()
          ? (tzChecks < 5 ? "only " + tzChecks + " checks: the worker stopped early"
              : tzChecks + " checks, always its own zone")
          : badTz.size() + "/" + tzChecks + " wrong: " + String.join("; ", badTz.subList(0, Math.min(3, badTz.size()))));
    }
  }

  // ---- helpers ----
  static Connection connect() throws SQLException {
    return DriverManager.getConnection(jdbcUrl, props);
  }

  static Object one(Connection c, String sql, Object... params) throws SQLException {
    try (PreparedStatement ps = c.prepareStatement(sql)) {
      for (int i = 0; i < params.length; i++) ps.setObject(i + 1, params[i]);
      try (ResultSet rs = ps.executeQuery()) {
        return rs.next() ? rs.getObject(1) : null;
      }
    }
  }

  static void exec(Connection c, String sql, Object... params) throws SQLException {
    try (PreparedStatement ps = c.prepareStatement(sql)) {
      for (int i = 0; i < params.length; i++) ps.setObject(i + 1, params[i]);
      ps.executeUpdate();
    }
  }

  static String showTz(Connection c) throws SQLException {
    return (String) one(c, "SHOW TimeZone");
  }

  static String[] opsOrder(int w) {
    String[] ops = {"ref", "balance", "probe", "pair", "transfer"};
    String[] out = new String[ops.length];
    for (int i = 0; i < ops.length; i++) out[i] = ops[(i + w) % ops.length];
    return out;
  }

  // PgJDBC's cancel API: Statement.cancel() from another thread (a CancelRequest on
  // a new connection to the same host and port).
  static volatile boolean cancelDone = false;

  static void cancelCheck(Connection c, String label) throws Exception {
    cancelDone = true;
    String outcome = "completed", code = null;
    long[] fired = {0};
    try (Statement st = c.createStatement()) {
      Thread canceller = new Thread(() -> {
        try {
          Thread.sleep(CANCEL_AFTER_MS);
          fired[0] = System.nanoTime();
          st.cancel();
        } catch (Exception e) {
          error("cancel thread", e);
        }
      });
      canceller.start();
      try {
        st.executeQuery("SELECT pg_sleep(30)").close();
      } catch (SQLException e) {
        outcome = e.getMessage();
        code = e.getSQLState();
      }
      long end = System.nanoTime();
      canceller.join();
      // Ended before the cancel was even sent (another error): report as never-cancelled.
      double tEnd = fired[0] == 0 || end < fired[0] ? Double.NaN : (end - fired[0]) / 1e9;
      Object val = one(c, "SELECT 1");
      double tOne = (System.nanoTime() - fired[0]) / 1e9;
      check("57014".equals(code) && !Double.isNaN(tEnd) && tEnd <= CANCEL_LIMIT_MS / 1000.0 && Integer.valueOf(1).equals(val)
              && tOne <= CANCEL_LIMIT_MS / 1000.0,
          "cancel pg_sleep(30) via Statement.cancel()" + label,
          String.format("%s SQLSTATE %s %.3fs after the cancel; SELECT 1 on the same connection -> %s %.3fs after "
              + "the cancel", outcome, code, tEnd, val, tOne));
    }
  }

  static void worker(int w, Stats stats, Map<Integer, Long> balances) {
    String zone = ZONES[w];
    int a = 2 * w + 1, b = 2 * w + 2;
    Map<Integer, Long> bal = new HashMap<>();
    bal.put(a, START_BALANCE);
    bal.put(b, START_BALANCE);
    try (Connection c = connect()) {
      try (Statement st = c.createStatement()) {
        st.execute("SET TimeZone = '" + zone + "'");
      }
      stats.tz("after SET", showTz(c), zone);
      String probeSql = w % 2 == 0 ? Q_PROBE_EVEN : Q_PROBE_ODD;
      int mult = w % 2 == 0 ? 2 : 3;
      for (int i = 0; i < ITERATIONS; i++) {
        for (String op : opsOrder(w)) {
          switch (op) {
            case "ref": {
              int k = (w * 7 + i) % REF_ROWS + 1;
              Object got = one(c, Q_REF, k);
              stats.reads++;
              if (!("v" + k).equals(got)) stats.badRead("ref " + k, got, "v" + k);
              break;
            }
            case "balance": {
              int acct = i % 2 == 1 ? a : b;
              Object got = one(c, Q_BALANCE, acct);
              stats.reads++;
              if (!bal.get(acct).equals(got)) stats.badRead("balance " + acct, got, bal.get(acct));
              break;
            }
            case "probe": {
              int x = i + w;
              Object got = one(c, probeSql, x);
              stats.reads++;
              if (!Integer.valueOf(x * mult).equals(got)) stats.badRead("probe(" + x + ")", got, x * mult);
              break;
            }
            case "pair": {
              Object got = one(c, Q_PAIR, a, b);
              stats.reads++;
              long want = bal.get(a) + bal.get(b);
              if (!Long.valueOf(want).equals(got)) stats.badRead("pair sum", got, want);
              break;
            }
            case "transfer": {
              long amt = i % 5 + 1;
              int src = i % 2 == 0 ? a : b, dst = i % 2 == 0 ? b : a;
              boolean rollback = i % 10 == 9;
              c.setAutoCommit(false); // PgJDBC sends BEGIN along with the first statement
              try {
                exec(c, Q_CREDIT, amt, dst);
                exec(c, Q_DEBIT, amt, src);
                Object got = one(c, Q_BALANCE, dst);
                stats.reads++;
                if (!Long.valueOf(bal.get(dst) + amt).equals(got)) {
                  stats.badRead("in-transaction balance " + dst, got, bal.get(dst) + amt);
                }
                if (i % 4 == 0) stats.tz("inside a transaction", showTz(c), zone);
                if (rollback) {
                  c.rollback();
                  stats.rollbacks++;
                } else {
                  c.commit();
                  stats.commits++;
                  bal.put(dst, bal.get(dst) + amt);
                  bal.put(src, bal.get(src) - amt);
                }
              } catch (SQLException e) {
                try { c.rollback(); } catch (SQLException ignored) { }
                throw e;
              } finally {
                c.setAutoCommit(true);
              }
              break;
            }
            default:
              throw new IllegalStateException(op);
          }
        }
        if (i % 6 == 0) stats.tz("iteration " + i, showTz(c), zone);
        if (w == 0 && i == ITERATIONS / 2) cancelCheck(c, "");
        stats.done++;
      }
      stats.tz("at the end", showTz(c), zone);
    } catch (Exception e) {
      error("worker " + w + " iteration " + stats.done, e);
    } finally {
      balances.putAll(bal);
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 1) {
      System.err.println("usage: java -cp postgresql.jar JdbcTest.java postgresql://USER:PASS@HOST:PORT/DB?...");
      System.exit(2);
    }
    URI u = new URI(args[0]);
    String userInfo = u.getRawUserInfo() == null ? "" : u.getRawUserInfo();
    int colon = userInfo.indexOf(':');
    String user = URLDecoder.decode(colon < 0 ? userInfo : userInfo.substring(0, colon), StandardCharsets.UTF_8);
    String password = colon < 0 ? "" : URLDecoder.decode(userInfo.substring(colon + 1), StandardCharsets.UTF_8);
    jdbcUrl = "jdbc:postgresql://" + u.getHost() + ":" + (u.getPort() < 0 ? 5432 : u.getPort()) + u.getRawPath()
        + (u.getRawQuery() == null ? "" : "?" + u.getRawQuery());
    props.setProperty("user", user);
    props.setProperty("password", password);
    props.setProperty("prepareThreshold", "1");
    props.setProperty("connectTimeout", "10");
    props.setProperty("ApplicationName", "hyperpool-drivers-jdbc");

    try (Connection c = connect(); Statement st = c.createStatement()) {
      st.execute("DROP TABLE IF EXISTS " + ACC);
      st.execute("DROP TABLE IF EXISTS " + REF);
      st.execute("CREATE TABLE " + ACC + " (id int PRIMARY KEY, balance bigint NOT NULL)");
      st.execute("CREATE TABLE " + REF + " (k int PRIMARY KEY, v text NOT NULL)");
      st.execute("INSERT INTO " + ACC + " SELECT g, " + START_BALANCE + " FROM generate_series(1, " + ACCOUNTS + ") g");
      st.execute("INSERT INTO " + REF + " SELECT g, 'v' || g FROM generate_series(1, " + REF_ROWS + ") g");
      check(true, "setup", ACC + " with " + ACCOUNTS + " accounts");
    } catch (Exception e) {
      error("setup", e);
      finish();
    }

    Stats[] stats = new Stats[WORKERS];
    Map<Integer, Long> balances = new ConcurrentHashMap<>();
    Thread[] threads = new Thread[WORKERS];
    for (int w = 0; w < WORKERS; w++) {
      final int ww = w;
      stats[w] = new Stats(w);
      threads[w] = new Thread(() -> worker(ww, stats[ww], balances));
      threads[w].setDaemon(true);
      threads[w].start();
    }
    long deadline = System.currentTimeMillis() + DEADLINE_MS;
    for (int w = 0; w < WORKERS; w++) {
      threads[w].join(Math.max(1, deadline - System.currentTimeMillis()));
      if (threads[w].isAlive()) error("worker " + w, new Exception("did not finish within " + DEADLINE_MS / 1000 + "s"));
    }
    for (int w = 0; w < WORKERS; w++) stats[w].report(ZONES[w]);
    if (!cancelDone) {
      // Worker 0 stopped before its mid-run cancel: still say whether cancel works.
      try (Connection c = connect()) {
        cancelCheck(c, " (own connection: worker 0 stopped early)");
      } catch (Exception e) {
        error("cancel check", e);
      }
    }

    try (Connection c = connect(); Statement st = c.createStatement()) {
      Map<Integer, Long> got = new HashMap<>();
      try (ResultSet rs = st.executeQuery("SELECT id, balance FROM " + ACC + " ORDER BY id")) {
        while (rs.next()) got.put(rs.getInt(1), rs.getLong(2));
      }
      long total;
      try (ResultSet rs = st.executeQuery("SELECT sum(balance)::bigint FROM " + ACC)) {
        rs.next();
        total = rs.getLong(1);
      }
      List<String> wrong = new ArrayList<>();
      for (Map.Entry<Integer, Long> e : balances.entrySet()) {
        if (!e.getValue().equals(got.get(e.getKey()))) wrong.add(e.getKey() + ": " + got.get(e.getKey()) + " != " + e.getValue());
      }
      check(wrong.isEmpty() && balances.size() == ACCOUNTS, "final balances match committed transfers",
          wrong.isEmpty() ? ACCOUNTS + " accounts" : String.join("; ", wrong.subList(0, Math.min(5, wrong.size()))));
      check(total == ACCOUNTS * START_BALANCE, "sum invariant", "sum " + total + ", want " + ACCOUNTS * START_BALANCE);
    } catch (Exception e) {
      error("final check", e);
    }
    finish();
  }
}
