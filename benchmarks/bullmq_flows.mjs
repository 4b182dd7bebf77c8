// The BullMQ peer of the flows row (benchmarks/flows_bench.py): BullMQ's FlowProducer with the same 3-step linear
// flow as a 3-level parent/child tree (c is the root, b its child, a b's child: BullMQ runs children before their
// parent, so a runs first and c last, each step computing from its child's return value as ours does from the
// previous step's result). One Node process, the harness's line protocol on stdout ("TAG {json}"):
//
//   node bullmq_flows.mjs run --port P --prefix Q --count N --concurrency 4 --inflight 50
//     A Worker per step queue at the given concurrency, then READY {}; on a GO line it adds N flows with
//     FlowProducer.add, at most --inflight adds in flight, and says ADDED {"t0", "t_added"}; DONE {"t_done"} when
//     the root (c) jobs of all N flows have completed ('completed' events); on CHECK it reads every completed root
//     job back and says CHECKED {"completed", "correct"} (correct: c's value is n + 3), then removes the keys.
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
  const opts = { host: '127.0.0.1', port: 6379, prefix: 'bench', count: 0, concurrency: 4, inflight: 50 };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '');
    if (!(key in opts) || i + 1 >= argv.length) throw new Error(`bad option ${argv[i]}`);
    opts[key] = typeof opts[key] === 'number' ? Number(argv[i + 1]) : argv[i + 1];
  }
  if (!(opts.count > 0 && opts.concurrency > 0 && opts.inflight > 0)) throw new Error('count, concurrency, inflight > 0');
  return opts;
}

async function main(o) {
  const connection = { host: o.host, port: o.port };
  const steps = ['a', 'b', 'c'].map((s) => `${o.prefix}-${s}`);
  let done = 0;
  let tDone = null;
  const step = async (job) => {
    if (job.queueName === steps[0]) return job.data.n + 1;
    const values = Object.values(await job.getChildrenValues());
    return Number(values[0]) + 1;
  };
  const workers = steps.map((q) => new Worker(q, step, { connection, concurrency: o.concurrency }));
  workers[2].on('completed', () => {
    done += 1;
    if (done === o.count) {
      tDone = now();
      say('DONE', { t_done: tDone, completed: done });
    }
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
      await producer.add({ name: 'c', queueName: steps[2], data: { n },
        children: [{ name: 'b', queueName: steps[1], data: { n },
          children: [{ name: 'a', queueName: steps[0], data: { n } }] }] });
    }
  };
  await Promise.all(Array.from({ length: Math.min(o.inflight, o.count) }, lane));
  say('ADDED', { t0, t_added: now() });
  if ((await nextLine()) === 'CHECK') {
    const root = new Queue(steps[2], { connection });
    const jobs = await root.getCompleted(0, -1);
    const correct = jobs.filter((job) => Number(job.returnvalue) === job.data.n + 3).length;
    say('CHECKED', { completed: jobs.length, correct });
    for (const q of steps) {
      const queue = new Queue(q, { connection });
      await queue.obliterate({ force: true });
      await queue.close();
    }
    await root.close();
  }
  await Promise.all(workers.map((w) => w.close()));
  await producer.close();
}

const [role, ...rest] = process.argv.slice(2);
if (role !== 'run') throw new Error(`unknown role ${role} (run)`);
await main(parseArgs(rest));
process.exit(0);
