#!/usr/bin/env node
// A lane agent written with ioredis, as its README tells an author to.
//
// Connects to OXIDEPM_LANE_SOCKET (ioredis takes a path; it has no unix://
// scheme of its own) with ioredis's default options: its ready check sends
// INFO, it reconnects by itself and resends what was unanswered. The rest
// is the agent of redis_py_agent.py: XGROUP CREATE at start (BUSYGROUP
// means the group is there), XAUTOCLAIM of what a dead run left pending,
// a blocking XREADGROUP, answers by multi() (MULTI/EXEC) or, for a message
// asking for "[plain]", by pipeline(); "crash" exits once before answering.
'use strict';
const fs = require('fs');
const path = require('path');
const Redis = require('ioredis');

const LIB = 'ioredis';
const env = process.env;
const AGENT = env.OXIDEPM_AGENT;
const GROUP = env.OXIDEPM_GROUP;
const INBOX = env.OXIDEPM_INBOXES.split(',').find((k) => k.endsWith(':webhook:inbox'));
const OUTBOX = env.OXIDEPM_OUTBOXES.split(',').find((k) => k.endsWith(':webhook:outbox'));
const CONSUMER = `${AGENT}-${process.pid}`;
const CRASHED = path.join(process.argv[2], `${AGENT}.crashed`);
// ioredis sets no timeout on a command by default, so any block works;
// 2 s keeps the loop responsive.
const BLOCK_MS = 2000;

const redis = new Redis(env.OXIDEPM_LANE_SOCKET);
// Without a listener, an 'error' event (a lost connection) would end the
// process; ioredis reconnects by itself.
redis.on('error', (e) => console.log(`${CONSUMER}: ${e.message}`));

function fieldsOf(flat) {
  const m = {};
  for (let i = 0; i + 1 < flat.length; i += 2) m[flat[i]] = flat[i + 1];
  return m;
}

async function handle(id, flat) {
  const f = fieldsOf(flat);
  const text = f.text || '';
  if (text.includes('crash') && !fs.existsSync(CRASHED)) {
    fs.writeFileSync(CRASHED, '');
    console.log(`${CONSUMER}: exiting before answering ${id}`);
    process.exit(3);
  }
  const batch = text.includes('[plain]') ? redis.pipeline() : redis.multi();
  batch.xadd(OUTBOX, '*', 'channel', f.channel || '', 'text', `${LIB}: ${text}`);
  batch.xack(INBOX, GROUP, id);
  const results = await batch.exec();
  for (const [err] of results) if (err) throw err;
}

async function start() {
  try {
    await redis.xgroup('CREATE', INBOX, GROUP, '$', 'MKSTREAM');
  } catch (e) {
    if (!String(e.message).startsWith('BUSYGROUP')) throw e;
  }
  // Everything pending, whoever had it: only one run of this agent lives.
  let cursor = '0-0';
  do {
    const [next, entries] = await redis.xautoclaim(INBOX, GROUP, CONSUMER, 0, cursor);
    for (const [id, flat] of entries) await handle(id, flat);
    cursor = next;
  } while (cursor !== '0-0');
}

async function serve() {
  console.log(`${CONSUMER}: reading ${INBOX}`);
  for (;;) {
    const got = await redis.xreadgroup(
      'GROUP', GROUP, CONSUMER, 'COUNT', 10, 'BLOCK', BLOCK_MS, 'STREAMS', INBOX, '>');
    for (const [, entries] of got || []) {
      for (const [id, flat] of entries) await handle(id, flat);
    }
  }
}

(async () => {
  for (;;) {
    try {
      await start();
      await serve();
    } catch (e) {
      // A refusal from the server is a bug of this agent: stop and say so.
      if (e instanceof Redis.ReplyError) {
        console.log(`${CONSUMER}: ${e.message}`);
        process.exit(1);
      }
      console.log(`${CONSUMER}: connection lost (${e.message}); again`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
})();
