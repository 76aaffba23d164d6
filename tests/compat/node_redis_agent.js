#!/usr/bin/env node
// A lane agent written with node-redis, as its README tells an author to.
//
// createClient({url: OXIDEPM_LANE}) with the default options (RESP3, so a
// HELLO 3 at connect, and CLIENT SETINFO) plus a connection name, as many
// authors set one (HELLO ... SETNAME). The rest is the agent of
// redis_py_agent.py: XGROUP CREATE at start (BUSYGROUP means the group is
// there), XAUTOCLAIM of what a dead run left pending, a blocking
// XREADGROUP, answers by multi().exec() (MULTI/EXEC) or, for a message
// asking for "[plain]", by multi().execAsPipeline(); "crash" exits once
// before answering.
'use strict';
const fs = require('fs');
const path = require('path');
const { createClient } = require('redis');

const LIB = 'node-redis';
const env = process.env;
const AGENT = env.OXIDEPM_AGENT;
const GROUP = env.OXIDEPM_GROUP;
const INBOX = env.OXIDEPM_INBOXES.split(',').find((k) => k.endsWith(':webhook:inbox'));
const OUTBOX = env.OXIDEPM_OUTBOXES.split(',').find((k) => k.endsWith(':webhook:outbox'));
const CONSUMER = `${AGENT}-${process.pid}`;
const CRASHED = path.join(process.argv[2], `${AGENT}.crashed`);
// node-redis sets no socket timeout by default; a blocking command holds
// the client's one connection, which this agent does not share, and 2 s
// keeps the loop responsive.
const BLOCK_MS = 2000;

const client = createClient({ url: env.OXIDEPM_LANE, name: CONSUMER });
// Without a listener, an 'error' event (a lost connection) would end the
// process; node-redis reconnects by itself.
client.on('error', (e) => console.log(`${CONSUMER}: ${e.message}`));

async function handle(id, f) {
  const text = f.text || '';
  if (text.includes('crash') && !fs.existsSync(CRASHED)) {
    fs.writeFileSync(CRASHED, '');
    console.log(`${CONSUMER}: exiting before answering ${id}`);
    process.exit(3);
  }
  const batch = client
    .multi()
    .xAdd(OUTBOX, '*', { channel: f.channel || '', text: `${LIB}: ${text}` })
    .xAck(INBOX, GROUP, id);
  if (text.includes('[plain]')) await batch.execAsPipeline();
  else await batch.exec();
}

async function start() {
  try {
    await client.xGroupCreate(INBOX, GROUP, '$', { MKSTREAM: true });
  } catch (e) {
    if (!String(e.message).startsWith('BUSYGROUP')) throw e;
  }
  // Everything pending, whoever had it: only one run of this agent lives.
  let cursor = '0-0';
  do {
    const got = await client.xAutoClaim(INBOX, GROUP, CONSUMER, 0, cursor);
    for (const m of got.messages) if (m) await handle(m.id, m.message);
    cursor = got.nextId;
  } while (cursor !== '0-0');
}

async function serve() {
  console.log(`${CONSUMER}: reading ${INBOX}`);
  for (;;) {
    const got = await client.xReadGroup(
      GROUP, CONSUMER, { key: INBOX, id: '>' }, { COUNT: 10, BLOCK: BLOCK_MS });
    for (const s of got || []) {
      for (const m of s.messages) await handle(m.id, m.message);
    }
  }
}

function refused(e) {
  // A reply error from the server (NOPERM, WRONGTYPE, ...) rather than a
  // lost connection.
  return e && e.constructor && e.constructor.name === 'ErrorReply';
}

(async () => {
  for (;;) {
    try {
      if (!client.isOpen) await client.connect();
      await start();
      await serve();
    } catch (e) {
      if (refused(e)) {
        console.log(`${CONSUMER}: ${e.message}`);
        process.exit(1);
      }
      console.log(`${CONSUMER}: connection lost (${e.message}); again`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
})();
