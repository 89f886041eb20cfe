// The producer in Node with node-postgres (pg): one order and its event in ONE transaction.
//
//   npm ci
//   DATABASE_URL=postgres://... OUTBOXCTL_SCHEMA=public node produce.js o-1001 4200
//
// Arguments: the order id and its total in cents (default o-1001 4200). OUTBOXCTL_SCHEMA is the
// schema that holds `outbox` and `orders` (default public). Any error, the COMMIT's included,
// rolls back both rows.
'use strict';
const { Client } = require('pg');

// The application's one tenant: tenant_id has no default.
const TENANT_ID = '00000000-0000-0000-0000-000000000001';

async function main() {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error('set DATABASE_URL');
  const schema = process.env.OUTBOXCTL_SCHEMA || 'public';
  const orderId = process.argv[2] || 'o-1001';
  const totalCents = Number.parseInt(process.argv[3] || '4200', 10);

  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`SET search_path TO ${client.escapeIdentifier(schema)}`);
    await client.query('BEGIN');
    try {
      await client.query('INSERT INTO orders (id, total_cents) VALUES ($1, $2)', [orderId, totalCents]);
      // The idempotency key derives from the business fact, so a retried transaction cannot write
      // the event twice. headers and available_at keep their defaults ('{}' and now()).
      const key = `order.placed:${orderId}`;
      await client.query(
        `INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
         VALUES ($1, 'order', $2, 'order.placed', $3::jsonb, $4)
         ON CONFLICT (idempotency_key) DO NOTHING`,
        [TENANT_ID, orderId, JSON.stringify({ order_id: orderId, total_cents: totalCents }), key],
      );
      await client.query('COMMIT');
      console.log(`committed order ${orderId} and its event ${key}`);
    } catch (err) {
      // After a failed COMMIT the server has already rolled back; ROLLBACK is then a no-op.
      await client.query('ROLLBACK').catch(() => {});
      throw err;
    }
  } finally {
    await client.end();
  }
}

main().catch((err) => {
  console.error(`produce.js: ${err.message}`);
  process.exit(1);
});
