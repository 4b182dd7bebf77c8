// The BullMQ peer of the jobs_live section (benchmarks/jobs_live.py). One script, two roles, each run as its own
// Node process; both speak the harness's line protocol on stdout ("TAG {json}") and read commands from stdin:
//
//   node bullmq_live.mjs worker  --port P --queue Q --count N --concurrency 8
//     A Worker at the given concurrency whose processor returns a small dict (kept: BullMQ's default). It runs one
//     warm-up job first, then says READY {}; it says DONE {"t_done": ...} when its 'completed' event has fired for
//     the N-th job named "bench" (the event comes after the job and its return value were stored). It stops when
//     stdin closes.
//   node bullmq_live.mjs produce --port P --queue Q --count N --chunk 1000
//     A Queue, connected, then READY {}; on a GO line it adds N jobs named "bench" ({n: i}) with Queue.addBulk in
//     chunks, and says ADDED {"t0": first add, "t_added": last chunk acknowledged}; on a CHECK line it reads every
//     completed job back and says CHECKED {"completed": ..., "correct": ...}, then removes the queue's keys.
//
// See bullmq_common.mjs for what the peer scripts share (BullMQ from $BULLMQ_HOME, the line protocol, the options).

import { bullmq, nextLine, now, parseArgs, say } from './bullmq_common.mjs';

const { Queue, Worker } = bullmq;

async function untilStdinCloses() {
  while ((await nextLine()) !== null) { /* the parent has nothing more to say until it closes stdin */ }
}

async function runWorker(o) {
  const connection = { host: o.host, port: o.port };
  let seen = 0;
  let warmed;
  const warm = new Promise((resolve) => { warmed = resolve; });
  const worker = new Worker(o.queue, async (job) => ({ n: job.data.n, double: job.data.n * 2 }),
    { connection, concurrency: o.concurrency });
  worker.on('completed', (job) => {
    if (job.name !== 'bench') {
      warmed();
      return;
    }
    seen += 1;
    if (seen === o.count) say('DONE', { t_done: now(), completed: seen });
  });
  worker.on('failed', (job, err) => process.stderr.write(`job ${job?.id} failed: ${err}\n`));
  worker.on('error', (err) => process.stderr.write(`worker error: ${err}\n`));
  await worker.waitUntilReady();
  const queue = new Queue(o.queue, { connection });
  await queue.add('warm', { n: -1 });
  await warm;
  await queue.close();
  say('READY', { pid: process.pid });
  await untilStdinCloses();
  await worker.close();
}

async function runProducer(o) {
  const queue = new Queue(o.queue, { connection: { host: o.host, port: o.port } });
  await queue.waitUntilReady();
  say('READY', { pid: process.pid });
  if ((await nextLine()) !== 'GO') return queue.close();
  const t0 = now();
  for (let start = 0; start < o.count; start += o.chunk) {
    const jobs = [];
    for (let i = start; i < Math.min(o.count, start + o.chunk); i += 1) jobs.push({ name: 'bench', data: { n: i } });
    await queue.addBulk(jobs);
  }
  say('ADDED', { t0, t_added: now() });
  if ((await nextLine()) === 'CHECK') {
    const jobs = (await queue.getCompleted(0, -1)).filter((job) => job.name === 'bench');
    const correct = jobs.filter((job) => job.returnvalue && job.returnvalue.double === job.data.n * 2).length;
    say('CHECKED', { completed: jobs.length, correct });
    await queue.obliterate({ force: true });
  }
  await queue.close();
}

const [role, ...rest] = process.argv.slice(2);
const opts = parseArgs(rest, { queue: 'bench', count: 0, concurrency: 8, chunk: 1000 }, ['count', 'concurrency', 'chunk']);
if (role === 'worker') await runWorker(opts);
else if (role === 'produce') await runProducer(opts);
else throw new Error(`unknown role ${role} (worker or produce)`);
process.exit(0);
