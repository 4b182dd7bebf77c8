// What the BullMQ peer scripts of the benchmark harness share (bullmq_live.mjs, bullmq_flows.mjs, bullmq_chord.mjs):
// BullMQ loaded from $BULLMQ_HOME (where the harness installed it and ioredis with npm), the harness's line protocol
// (TAG {json} lines on stdout, commands on stdin), their option parser, and the run of a FlowProducer peer.
//
// Times are epoch seconds from performance.timeOrigin + performance.now().

import { createRequire } from 'node:module';
import path from 'node:path';
import readline from 'node:readline';

const require = createRequire(path.join(process.env.BULLMQ_HOME ?? '.', 'package.json'));
export const bullmq = require('bullmq');

export const now = () => (performance.timeOrigin + performance.now()) / 1000;
export const say = (tag, payload = {}) => process.stdout.write(`${tag} ${JSON.stringify(payload)}\n`);

const stdinLines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();

/** The next stdin line, or null at EOF. */
export async function nextLine() {
  const { value, done } = await stdinLines.next();
  return done ? null : value.trim();
}

/** `--key value` pairs over `defaults` (a number default makes a number option); every key of `positive` must be
 * > 0. */
export function parseArgs(argv, defaults, positive) {
  const opts = { host: '127.0.0.1', port: 6379, ...defaults };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '');
    if (!(key in opts) || i + 1 >= argv.length) throw new Error(`bad option ${argv[i]}`);
    opts[key] = typeof opts[key] === 'number' ? Number(argv[i + 1]) : argv[i + 1];
  }
  if (!positive.every((key) => opts[key] > 0)) throw new Error(`${positive.join(', ')} must be > 0`);
  return opts;
}

/** A FlowProducer peer's run (the protocol of bullmq_flows.mjs and bullmq_chord.mjs): a Worker per queue of
 * `processors` (queue name -> processor) at `o.concurrency`, then READY; on GO, `o.count` flows from `flowOf(n)`
 * added with at most `o.inflight` adds in flight, then ADDED; DONE once `o.count` jobs of `rootQueue` completed; on
 * CHECK, CHECKED with how many completed root jobs `isCorrect(job)`, then every queue's keys removed. */
export async function runFlowPeer(o, { processors, rootQueue, flowOf, isCorrect }) {
  const { FlowProducer, Queue, Worker } = bullmq;
  const connection = { host: o.host, port: o.port };
  const names = Object.keys(processors);
  let done = 0;
  const workers = names.map((q) => new Worker(q, processors[q], { connection, concurrency: o.concurrency }));
  workers[names.indexOf(rootQueue)].on('completed', () => {
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
  if ((await nextLine()) === 'GO') {
    const t0 = now();
    let next = 0;
    const lane = async () => {
      while (next < o.count) {
        const n = next;
        next += 1;
        await producer.add(flowOf(n));
      }
    };
    await Promise.all(Array.from({ length: Math.min(o.inflight, o.count) }, lane));
    say('ADDED', { t0, t_added: now() });
    if ((await nextLine()) === 'CHECK') {
      const root = new Queue(rootQueue, { connection });
      const jobs = await root.getCompleted(0, -1);
      say('CHECKED', { completed: jobs.length, correct: jobs.filter(isCorrect).length });
      for (const q of names) {
        const queue = new Queue(q, { connection });
        await queue.obliterate({ force: true });
        await queue.close();
      }
      await root.close();
    }
  }
  await Promise.all(workers.map((w) => w.close()));
  await producer.close();
}
