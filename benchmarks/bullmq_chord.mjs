// The BullMQ peer of the canvas row (benchmarks/canvas_bench.py): BullMQ's FlowProducer with a parent of MEMBERS
// children, our chord of MEMBERS members and a body (BullMQ runs the children first, then the parent, which sums its
// children's return values as our body sums its members' results). One Node process, the harness's line protocol on
// stdout ("TAG {json}"):
//
//   node bullmq_chord.mjs run --port P --prefix Q --count N --members 100 --concurrency 4 --inflight 10
//     A Worker per queue (children, parents) at the given concurrency, then READY {}; on a GO line it adds N parents
//     with FlowProducer.add, at most --inflight adds in flight, and says ADDED {"t0", "t_added"}; DONE {"t_done"}
//     when all N parents have completed ('completed' events); on CHECK it reads every completed parent back and
//     says CHECKED {"completed", "correct"} (correct: the sum of 0..members-1), then removes the keys.
//
// Times are epoch seconds from performance.timeOrigin + performance.now(). BullMQ and ioredis come from $BULLMQ_HOME
// (installed there by the harness with npm).

import { createRequire } from 'node:module';
import path from 'node:path';
import readline from 'node:readline';

const require = createRequire(path.join(process.env.BULLMQ_HOME ?? '.', 'package.json'));
const { FlowProducer, Queue, Worker } = require('bullmq');

const now = () => (performance.timeOrigin + performance.now()) / 1000;
const say = (tag, payload = {}) => process.stdout.write(`${tag} ${JSON.stringify(payload)}\n`);
const stdinLines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function nextLine() {
  const { value, done } = await stdinLines.next();
  return done ? null : value.trim();
}

function parseArgs(argv) {
  const opts = { host: '127.0.0.1', port: 6379, prefix: 'bench', count: 0, members: 100, concurrency: 4, inflight: 10 };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '');
    if (!(key in opts) || i + 1 >= argv.length) throw new Error(`bad option ${argv[i]}`);
    opts[key] = typeof opts[key] === 'number' ? Number(argv[i + 1]) : argv[i + 1];
  }
  if (!(opts.count > 0 && opts.members > 0 && opts.concurrency > 0 && opts.inflight > 0)) {
    throw new Error('count, members, concurrency, inflight > 0');
  }
  return opts;
}

async function main(o) {
  const connection = { host: o.host, port: o.port };
  const [membersQ, bodyQ] = [`${o.prefix}-member`, `${o.prefix}-body`];
  const want = (o.members * (o.members - 1)) / 2;
  let done = 0;
  const member = async (job) => job.data.i;
  const body = async (job) => Object.values(await job.getChildrenValues()).reduce((a, b) => a + Number(b), 0);
  const workers = [new Worker(membersQ, member, { connection, concurrency: o.concurrency }),
    new Worker(bodyQ, body, { connection, concurrency: o.concurrency })];
  workers[1].on('completed', () => {
    done += 1;
    if (done === o.count) say('DONE', { t_done: now(), completed: done });
  });
  for (const w of workers) {
    w.on('failed', (job, err) => process.stderr.write(`job ${job?.id} failed: ${err}\n`));
    w.on('error', (err) => process.stderr.write(`worker error: ${err}\n`));
    await w.waitUntilReady();
  }
  const producer = new FlowProducer({ connection });
  await producer.waitUntilReady();
  say('READY', { pid: process.pid });
  if ((await nextLine()) !== 'GO') return;
  const t0 = now();
  let next = 0;
  const lane = async () => {
    while (next < o.count) {
      const n = next;
      next += 1;
      const children = Array.from({ length: o.members }, (_, i) => ({ name: 'm', queueName: membersQ, data: { i } }));
      await producer.add({ name: 'body', queueName: bodyQ, data: { n }, children });
    }
  };
  await Promise.all(Array.from({ length: Math.min(o.inflight, o.count) }, lane));
  say('ADDED', { t0, t_added: now() });
  if ((await nextLine()) === 'CHECK') {
    const parents = new Queue(bodyQ, { connection });
    const jobs = await parents.getCompleted(0, -1);
    const correct = jobs.filter((job) => Number(job.returnvalue) === want).length;
    say('CHECKED', { completed: jobs.length, correct });
    for (const q of [membersQ, bodyQ]) {
      const queue = new Queue(q, { connection });
      await queue.obliterate({ force: true });
      await queue.close();
    }
    await parents.close();
  }
  await Promise.all(workers.map((w) => w.close()));
  await producer.close();
}

const [role, ...rest] = process.argv.slice(2);
if (role !== 'run') throw new Error(`unknown role ${role} (run)`);
await main(parseArgs(rest));
process.exit(0);
