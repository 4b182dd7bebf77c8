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
// See bullmq_common.mjs for what the peer scripts share.

import { parseArgs, runFlowPeer } from './bullmq_common.mjs';

const [role, ...rest] = process.argv.slice(2);
if (role !== 'run') throw new Error(`unknown role ${role} (run)`);
const o = parseArgs(rest, { prefix: 'bench', count: 0, members: 100, concurrency: 4, inflight: 10 },
  ['count', 'members', 'concurrency', 'inflight']);
const [membersQ, bodyQ] = [`${o.prefix}-member`, `${o.prefix}-body`];
const want = (o.members * (o.members - 1)) / 2;
await runFlowPeer(o, {
  processors: {
    [membersQ]: async (job) => job.data.i,
    [bodyQ]: async (job) => Object.values(await job.getChildrenValues()).reduce((x, y) => x + Number(y), 0),
  },
  rootQueue: bodyQ,
  flowOf: (n) => ({ name: 'body', queueName: bodyQ, data: { n },
    children: Array.from({ length: o.members }, (_, i) => ({ name: 'm', queueName: membersQ, data: { i } })) }),
  isCorrect: (job) => Number(job.returnvalue) === want,
});
process.exit(0);
