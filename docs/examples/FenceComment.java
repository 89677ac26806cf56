// The statement fence comment for Java: FenceComment.withFence(sql, lease,
// owner, token) puts the lease's fence in a sqlcommenter comment at the
// start of sql, for fenceproxy to read and remove. A Hibernate
// StatementInspector, a JDBC wrapper or plain JDBC code calls it per
// statement (docs/statement-fences.md). Tested with MariaDB Connector/J
// through the proxy by integration/stmtfence_java_test.go.
package com.example;

import java.nio.charset.StandardCharsets;

public final class FenceComment {
  private FenceComment() {}

  /** The comment for the lease: name, owner token (any bytes), fence token (unsigned). */
  public static String comment(String lease, byte[] owner, long token) {
    return "/*fence_lease='" + pct(lease.getBytes(StandardCharsets.UTF_8)) + "',fence_owner='" + pct(owner)
        + "',fence_token='" + Long.toUnsignedString(token) + "'*/ ";
  }

  /** sql with the lease's comment at its start (after a trailing "-- ..." it would be part of that comment). */
  public static String withFence(String sql, String lease, byte[] owner, long token) {
    return comment(lease, owner, token) + sql;
  }

  /** Percent-encodes every byte but A-Z a-z 0-9 - . _ ~. */
  static String pct(byte[] b) {
    StringBuilder s = new StringBuilder(b.length * 3);
    for (byte x : b) {
      int c = x & 0xff;
      if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || "-._~".indexOf(c) >= 0) {
        s.append((char) c);
      } else {
        s.append('%').append(Character.toUpperCase(Character.forDigit(c >> 4, 16)))
            .append(Character.toUpperCase(Character.forDigit(c & 0xf, 16)));
      }
    }
    return s.toString();
  }
}
