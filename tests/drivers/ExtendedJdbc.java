// PgJDBC with prepareThreshold=1 (server-side named statements from the first
// execution) and the query cache (docs/architecture.md, "Query cache"). One
// JSON-ish line per step.
//
// usage: java -cp postgresql.jar ExtendedJdbc.java URL reads TAG N | write
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

public class ExtendedJdbc {
  public static void main(String[] args) throws Exception {
    // postgresql://user:pass@host:port/db?sslmode=disable -> JDBC form.
    java.net.URI u = new java.net.URI(args[0]);
    String[] userInfo = u.getRawUserInfo().split(":", 2);
    Properties p = new Properties();
    p.setProperty("user", java.net.URLDecoder.decode(userInfo[0], "UTF-8"));
    p.setProperty("password", java.net.URLDecoder.decode(userInfo[1], "UTF-8"));
    p.setProperty("sslmode", "disable");
    p.setProperty("prepareThreshold", "1");
    String jdbc = "jdbc:postgresql://" + u.getHost() + ":" + u.getPort() + u.getPath();
    try (Connection c = DriverManager.getConnection(jdbc, p)) {
      if (args[1].equals("reads")) {
        String tag = args[2];
        int n = Integer.parseInt(args[3]);
        List<String> got = new ArrayList<>();
        List<PreparedStatement> stmts = new ArrayList<>();
        for (int i = 1; i <= 5; i++) {
          stmts.add(c.prepareStatement("SELECT v FROM ext_py WHERE k = ? /* " + tag + " " + i + " */"));
        }
        for (int r = 0; r < n; r++) {
          for (int i = 1; i <= 5; i++) {
            PreparedStatement s = stmts.get(i - 1);
            s.setInt(1, i);
            try (ResultSet rs = s.executeQuery()) {
              rs.next();
              got.add(rs.getString(1));
            }
          }
        }
        System.out.println("{\"reads\": \"" + String.join(",", got) + "\"}");
      } else if (args[1].equals("write")) {
        PreparedStatement q = c.prepareStatement("SELECT v FROM ext_py WHERE k = ?");
        PreparedStatement w = c.prepareStatement("UPDATE ext_py SET v = ? WHERE k = ?");
        String[] seen = new String[3];
        for (int step = 0; step < 3; step++) {
          if (step == 2) {
            w.setString(1, "w11");
            w.setInt(2, 11);
            w.executeUpdate();
          }
          q.setInt(1, 11);
          try (ResultSet rs = q.executeQuery()) {
            rs.next();
            seen[step] = rs.getString(1);
          }
        }
        w.setString(1, "v11");
        w.setInt(2, 11);
        w.executeUpdate();
        System.out.println("{\"before\": \"" + seen[0] + "\", \"again\": \"" + seen[1] + "\", \"after\": \"" + seen[2] + "\"}");
      }
    }
  }
}
