// Plain JDBC (MariaDB Connector/J) through fenceproxy with
// docs/examples/FenceComment.java; run by TestJavaFenceComment
// (integration/stmtfence_java_test.go).
//
// Usage: java FenceCommentJdbc host port user password database lease
//          staleOwnerHex staleToken validOwnerHex validToken
// Over a text-protocol connection and one with server-side prepared
// statements (useServerPrepStmts=true): writes under the valid fence while
// the session holds the stale one, then writes under the stale fence while
// the session holds the valid one. Prints {"valid":N,"stale":M}: the rows
// each changed.
import com.example.FenceComment;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.HexFormat;

public final class FenceCommentJdbc {
  public static void main(String[] a) throws SQLException {
    String url = "jdbc:mariadb://" + a[0] + ":" + a[1] + "/" + a[4];
    String lease = a[5];
    byte[] staleOwner = HexFormat.of().parseHex(a[6]), validOwner = HexFormat.of().parseHex(a[8]);
    long staleToken = Long.parseUnsignedLong(a[7]), validToken = Long.parseUnsignedLong(a[9]);
    String[] modes = {"", "?useServerPrepStmts=true"};
    int valid = 0, stale = 0;
    for (int m = 0; m < modes.length; m++) {
      String tag = "java" + m + "-";
      try (Connection c = DriverManager.getConnection(url + modes[m], a[2], a[3])) {
        session(c, lease, staleOwner, staleToken);
        try (Statement s = c.createStatement()) {
          valid += s.executeUpdate(FenceComment.withFence(
              "INSERT INTO invoices (customer, period, amount) VALUES ('" + tag + "1', '2026-01', 1)", lease, validOwner, validToken));
        }
        try (PreparedStatement p = c.prepareStatement(FenceComment.withFence(
            "INSERT INTO invoices (customer, period, amount) VALUES (?, '2026-01', 1)", lease, validOwner, validToken))) {
          p.setString(1, tag + "2");
          valid += p.executeUpdate();
        }
        try (PreparedStatement p = c.prepareStatement(FenceComment.withFence(
            "UPDATE invoices SET amount = amount + 1 WHERE customer LIKE ?", lease, validOwner, validToken))) {
          p.setString(1, tag + "%");
          valid += p.executeUpdate();
        }

        session(c, lease, validOwner, validToken);
        try (Statement s = c.createStatement()) {
          stale += s.executeUpdate(FenceComment.withFence(
              "UPDATE invoices SET amount = 100 WHERE customer LIKE '" + tag + "%'", lease, staleOwner, staleToken));
        }
        try (PreparedStatement p = c.prepareStatement(FenceComment.withFence(
            "UPDATE invoices SET amount = 100 WHERE customer LIKE ?", lease, staleOwner, staleToken))) {
          p.setString(1, tag + "%");
          stale += p.executeUpdate();
        }
        try (PreparedStatement p = c.prepareStatement(FenceComment.withFence(
            "INSERT INTO invoices (customer, period, amount) VALUES (?, '2026-01', 100)", lease, staleOwner, staleToken))) {
          p.setString(1, tag + "3");
          stale += p.executeUpdate();
        }
      }
    }
    System.out.println("{\"valid\":" + valid + ",\"stale\":" + stale + "}");
  }

  // The session's own fence, which each comment must override.
  static void session(Connection c, String lease, byte[] owner, long token) throws SQLException {
    try (PreparedStatement p = c.prepareStatement("SET @fence_lease = ?, @fence_owner = ?, @fence_token = ?")) {
      p.setString(1, lease);
      p.setBytes(2, owner);
      p.setLong(3, token);
      p.execute();
    }
  }
}
