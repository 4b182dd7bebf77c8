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
// See bullmq_common.mjs for what the peer scripts share.

import { parseArgs, runFlowPeer } from './bullmq_common.mjs';

const [role, ...rest] = process.argv.slice(2);
if (role !== 'run') throw new Error(`unknown role ${role} (run)`);
const o = parseArgs(rest, { prefix: 'bench', count: 0, concurrency: 4, inflight: 50 }, ['count', 'concurrency', 'inflight']);
const [a, b, c] = ['a', 'b', 'c'].map((s) => `${o.prefix}-${s}`);
const first = async (job) => job.data.n + 1;
const after = async (job) => Number(Object.values(await job.getChildrenValues())[0]) + 1;
await runFlowPeer(o, {
  processors: { [a]: first, [b]: after, [c]: after },
  rootQueue: c,
  flowOf: (n) => ({ name: 'c', queueName: c, data: { n },
    children: [{ name: 'b', queueName: b, data: { n }, children: [{ name: 'a', queueName: a, data: { n } }] }] }),
  isCorrect: (job) => Number(job.returnvalue) === job.data.n + 3,
});
process.exit(0);
