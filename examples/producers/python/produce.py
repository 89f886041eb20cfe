"""The producer in Python with psycopg 3: one order and its event in ONE transaction.

    python3 -m pip install 'psycopg[binary]'
    DATABASE_URL=postgres://... OUTBOXCTL_SCHEMA=public python3 produce.py o-1001 4200

Arguments: the order id and its total in cents (default o-1001 4200). OUTBOXCTL_SCHEMA is the
schema that holds `outbox` and `orders` (default public). `with conn.transaction()` commits at the
end of the block; an exception inside it, or a failed COMMIT, leaves neither row.
"""
import os
import sys

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

# The application's one tenant: tenant_id has no default.
TENANT_ID = "00000000-0000-0000-0000-000000000001"


def main() -> int:
    url = os.environ.get("DATABASE_URL")
    if not url:
        print("produce.py: set DATABASE_URL", file=sys.stderr)
        return 2
    schema = os.environ.get("OUTBOXCTL_SCHEMA") or "public"
    order_id = sys.argv[1] if len(sys.argv) > 1 else "o-1001"
    total_cents = int(sys.argv[2]) if len(sys.argv) > 2 else 4200

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        with conn.transaction():
            conn.execute(
                "INSERT INTO orders (id, total_cents) VALUES (%s, %s)", (order_id, total_cents)
            )
            # The idempotency key derives from the business fact, so a retried transaction
            # cannot write the event twice. headers and available_at keep their defaults.
            key = f"order.placed:{order_id}"
            conn.execute(
                """INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type,
                                       payload, idempotency_key)
                   VALUES (%s, 'order', %s, 'order.placed', %s, %s)
                   ON CONFLICT (idempotency_key) DO NOTHING""",
                (TENANT_ID, order_id, Jsonb({"order_id": order_id, "total_cents": total_cents}), key),
            )
    print(f"committed order {order_id} and its event {key}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except psycopg.Error as e:
        # libpq quotes a malformed URL in its message, password and all.
        message = str(e).replace(os.environ["DATABASE_URL"], "$DATABASE_URL")
        print(f"produce.py: {message}", file=sys.stderr)
        sys.exit(1)
