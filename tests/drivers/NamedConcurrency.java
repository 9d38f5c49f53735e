// Named prepared statements shared by concurrent sessions, PgJDBC (issue 28:
// the node-postgres / postgres.js version is named_concurrency_test.mjs, the
// asyncpg one named_concurrency_test.py).
//
// 8 connections with prepareThreshold=1, so every PreparedStatement runs as a
// named server statement from its first execution (S_1, S_2, ... numbered per
// connection in the order the connection first uses a text; the order is
// rotated per worker, so one name stands for different texts on different
// connections). Each loops over three texts `SELECT ?::int + ?::int + N`
// with the same values every time (the query cache holds and coalesces
// them) and a write transaction (autocommit off: UPDATE, then commit). A
// ninth connection meanwhile runs DDL (CREATE / ALTER / DROP of a side
// table) in a loop, which moves the Endpoint's schema epoch under the
// workers' statements. No execution may fail and every committed increment
// must be there.
//
// usage: java -cp /usr/share/java/postgresql.jar NamedConcurrency.java URL
//        URL = postgresql://USER:PASS@HOST:PORT/DB?sslmode=disable

import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

public class NamedConcurrency {
  static final String NAME = "named_concurrency_jdbc";
  static final int CLIENTS = 8;
  static final int ROUNDS = Integer.parseInt(System.getenv().getOrDefault("DRV_NAMED_ROUNDS", "100"));
  static final int TEXTS = 3;
  static final String TABLE = "drv_named_counter_jdbc";
  static final String SIDE = "drv_named_ddl_jdbc";
  static final long DEADLINE_MS = 50000;

  static String jdbcUrl;
  static final Properties props = new Properties();
  static final List<String> errors = new CopyOnWriteArrayList<>();
  static final List<String> bad = new CopyOnWriteArrayList<>();
  static final int[] commits = new int[CLIENTS];
  static int passed = 0, failed = 0;

  static Connection connect() throws SQLException {
    return DriverManager.getConnection(jdbcUrl, props);
  }

  static String describe(SQLException e) {
    return "[" + e.getSQLState() + "] " + e.getMessage().split("\n")[0];
  }

  static void client(int i) {
    try (Connection c = connect()) {
      for (int r = 0; r < ROUNDS; r++) {
        for (int k = 0; k < TEXTS; k++) {
          int n = (i + r + k) % TEXTS;
          try (PreparedStatement ps = c.prepareStatement("SELECT ?::int + ?::int + " + n + " AS s")) {
            ps.setInt(1, 1);
            ps.setInt(2, 2);
            try (ResultSet rs = ps.executeQuery()) {
              rs.next();
              int v = rs.getInt(1);
              if (v != 3 + n) bad.add("client " + i + ": add" + n + " = " + v);
            }
          } catch (SQLException e) {
            errors.add("client " + i + " add" + n + ": " + describe(e));
          }
        }
        try {
          c.setAutoCommit(false);
          try (PreparedStatement up = c.prepareStatement("UPDATE " + TABLE + " SET n = n + 1 WHERE id = ?")) {
            up.setInt(1, i);
            up.executeUpdate();
          }
          c.commit();
          commits[i]++;
        } catch (SQLException e) {
          errors.add("client " + i + " transaction: " + describe(e));
          try { c.rollback(); } catch (SQLException ignored) { }
        } finally {
          c.setAutoCommit(true);
        }
      }
    } catch (SQLException e) {
      errors.add("client " + i + " connection: " + describe(e));
    }
  }

  static void ddl(AtomicBoolean stop, AtomicInteger rounds) {
    try (Connection c = connect(); Statement st = c.createStatement()) {
      while (!stop.get()) {
        st.execute("CREATE TABLE " + SIDE + " (a int)");
        st.execute("ALTER TABLE " + SIDE + " ADD COLUMN b text");
        st.execute("DROP TABLE " + SIDE);
        rounds.incrementAndGet();
      }
    } catch (SQLException e) {
      errors.add("ddl: " + describe(e));
    }
  }

  static void check(boolean ok, String name, String detail) {
    if (ok) passed++; else failed++;
    System.out.println((ok ? "ok   " : "FAIL ") + NAME + ": " + name + (ok || detail.isEmpty() ? "" : " - " + detail));
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 1) {
      System.err.println("usage: java -cp postgresql.jar NamedConcurrency.java postgresql://USER:PASS@HOST:PORT/DB?...");
      System.exit(2);
    }
    URI u = new URI(args[0]);
    String userInfo = u.getRawUserInfo() == null ? "" : u.getRawUserInfo();
    int colon = userInfo.indexOf(':');
    props.setProperty("user", URLDecoder.decode(colon < 0 ? userInfo : userInfo.substring(0, colon),
        StandardCharsets.UTF_8));
    props.setProperty("password", colon < 0 ? "" : URLDecoder.decode(userInfo.substring(colon + 1),
        StandardCharsets.UTF_8));
    props.setProperty("prepareThreshold", "1");
    props.setProperty("connectTimeout", "10");
    jdbcUrl = "jdbc:postgresql://" + u.getHost() + ":" + (u.getPort() < 0 ? 5432 : u.getPort()) + u.getRawPath()
        + (u.getRawQuery() == null ? "" : "?" + u.getRawQuery());

    try (Connection c = connect(); Statement st = c.createStatement()) {
      st.execute("DROP TABLE IF EXISTS " + TABLE);
      st.execute("DROP TABLE IF EXISTS " + SIDE);
      st.execute("CREATE TABLE " + TABLE + " (id int PRIMARY KEY, n bigint NOT NULL)");
      st.execute("INSERT INTO " + TABLE + " SELECT g, 0 FROM generate_series(0, " + (CLIENTS - 1) + ") g");
    }
    AtomicBoolean stop = new AtomicBoolean(false);
    AtomicInteger ddlRounds = new AtomicInteger();
    Thread ddlThread = new Thread(() -> ddl(stop, ddlRounds));
    ddlThread.start();
    Thread[] workers = new Thread[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
      final int w = i;
      workers[i] = new Thread(() -> client(w));
      workers[i].start();
    }
    long deadline = System.currentTimeMillis() + DEADLINE_MS;
    boolean finished = true;
    for (Thread t : workers) {
      t.join(Math.max(1, deadline - System.currentTimeMillis()));
      finished &= !t.isAlive();
    }
    stop.set(true);
    ddlThread.join(5000);

    StringBuilder lost = new StringBuilder();
    try (Connection c = connect(); Statement st = c.createStatement();
         ResultSet rs = st.executeQuery("SELECT id, n FROM " + TABLE + " ORDER BY id")) {
      while (rs.next()) {
        int id = rs.getInt(1);
        long n = rs.getLong(2);
        if (n != commits[id]) lost.append(" client ").append(id).append(": ").append(n).append(" of ").append(commits[id]);
      }
    }
    check(finished, CLIENTS + " clients finished", "deadline passed");
    check(errors.isEmpty(), "no errors (" + ddlRounds.get() + " DDL rounds beside)",
        errors.size() + " errors: " + String.join("; ", errors.subList(0, Math.min(5, errors.size()))));
    check(bad.isEmpty(), "every result right", String.join("; ", bad.subList(0, Math.min(5, bad.size()))));
    check(lost.length() == 0, "committed counters", lost.toString());
    System.out.println("SUMMARY " + NAME + ": " + (failed == 0 ? "PASS" : "FAIL") + " (" + passed
        + " checks passed, " + failed + " failed)");
    System.out.flush();
    Runtime.getRuntime().halt(failed == 0 ? 0 : 1);
  }
}
