// The producer in Java with JDBC: one order and its event in ONE transaction.
//
//   DATABASE_URL=postgres://... OUTBOXCTL_SCHEMA=public \
//     java -cp /usr/share/java/postgresql.jar Produce.java o-1001 4200
//
// The PostgreSQL JDBC driver: Debian's libpostgresql-jdbc-java (or org.postgresql:postgresql from
// Maven). Arguments: the order id and its total in cents (default o-1001 4200). OUTBOXCTL_SCHEMA
// is the schema that holds `outbox` and `orders` (default public). DATABASE_URL may be a libpq
// URL (postgres://user:password@host:port/db) or a jdbc:postgresql: URL. Any exception before
// commit(), or a failed commit(), leaves neither row.
import java.net.URI;
import java.net.URISyntaxException;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.Properties;

public class Produce {
    // The application's one tenant: tenant_id has no default.
    static final String TENANT_ID = "00000000-0000-0000-0000-000000000001";

    public static void main(String[] args) {
        String url = System.getenv("DATABASE_URL");
        if (url == null || url.isEmpty()) {
            System.err.println("Produce.java: set DATABASE_URL");
            System.exit(2);
        }
        String schema = System.getenv().getOrDefault("OUTBOXCTL_SCHEMA", "public");
        String orderId = args.length > 0 ? args[0] : "o-1001";
        long totalCents = args.length > 1 ? Long.parseLong(args[1]) : 4200;

        Properties props = new Properties();
        props.setProperty("currentSchema", schema); // the search_path of the session
        String jdbcUrl;
        try {
            jdbcUrl = toJdbc(url, props);
        } catch (URISyntaxException e) {
            // Its message quotes the URL, password and all.
            System.err.println("Produce.java: DATABASE_URL is not a valid URL: " + e.getReason());
            System.exit(2);
            return;
        }
        try (Connection conn = DriverManager.getConnection(jdbcUrl, props)) {
            conn.setAutoCommit(false); // the transaction starts with the first statement
            try {
                try (PreparedStatement st =
                        conn.prepareStatement("INSERT INTO orders (id, total_cents) VALUES (?, ?)")) {
                    st.setString(1, orderId);
                    st.setLong(2, totalCents);
                    st.executeUpdate();
                }
                // The payload is built by the database here (no JSON library needed); with one,
                // bind its text as ?::jsonb. The idempotency key derives from the business fact, so
                // a retried transaction cannot write the event twice. headers and available_at keep
                // their defaults.
                String key = "order.placed:" + orderId;
                try (PreparedStatement st = conn.prepareStatement(
                        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key) "
                                + "VALUES (?::uuid, 'order', ?, 'order.placed', "
                                + "jsonb_build_object('order_id', ?::text, 'total_cents', ?::bigint), ?) "
                                + "ON CONFLICT (idempotency_key) DO NOTHING")) {
                    st.setString(1, TENANT_ID);
                    st.setString(2, orderId);
                    st.setString(3, orderId);
                    st.setLong(4, totalCents);
                    st.setString(5, key);
                    st.executeUpdate();
                }
                conn.commit();
                System.out.println("committed order " + orderId + " and its event " + key);
            } catch (SQLException e) {
                conn.rollback();
                throw e;
            }
        } catch (SQLException e) {
            System.err.println("Produce.java: " + e.getMessage());
            System.exit(1);
        }
    }

    /** A libpq URL as a JDBC URL, its user and password moved into props (never printed). */
    static String toJdbc(String url, Properties props) throws URISyntaxException {
        if (url.startsWith("jdbc:")) {
            return url;
        }
        URI u = new URI(url).parseServerAuthority(); // a bad host or port is an error here
        if (u.getRawUserInfo() != null) {
            String[] userInfo = u.getRawUserInfo().split(":", 2);
            props.setProperty("user", URLDecoder.decode(userInfo[0], StandardCharsets.UTF_8));
            if (userInfo.length > 1) {
                props.setProperty("password", URLDecoder.decode(userInfo[1], StandardCharsets.UTF_8));
            }
        }
        String host = u.getHost() == null ? "localhost" : u.getHost();
        String port = u.getPort() == -1 ? "" : ":" + u.getPort();
        String query = u.getRawQuery() == null ? "" : "?" + u.getRawQuery();
        return "jdbc:postgresql://" + host + port + u.getRawPath() + query;
    }
}
