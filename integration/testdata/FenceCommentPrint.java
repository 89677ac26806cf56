// Prints docs/examples/FenceComment.java's comment for each stdin line
// "leaseHex ownerHex token", one per line; TestJavaFenceComment compares them
// with the Go lease package's.
import com.example.FenceComment;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;

public final class FenceCommentPrint {
  public static void main(String[] a) throws IOException {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    for (String line; (line = in.readLine()) != null; ) {
      String[] f = line.split(" ");
      String lease = new String(HexFormat.of().parseHex(f[0]), StandardCharsets.UTF_8);
      System.out.println(FenceComment.comment(lease, HexFormat.of().parseHex(f[1]), Long.parseUnsignedLong(f[2])));
    }
  }
}
