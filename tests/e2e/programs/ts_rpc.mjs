// Scenario 3: a workflow calls `square`, which only a worker of another group registers.
// role "worker" serves `square` until SIGTERM; role "caller" registers only `relay` and runs it.
import { Resonate } from "@resonatehq/sdk";
import { config, emit, settings, untilTerminated } from "./tsshared.mjs";

function square(ctx, x) {
  return { value: x * x, pid: process.pid };
}

function* relay(ctx, x, group) {
  const answer = yield* ctx.rpc("square", x, ctx.options({ target: group }));
  return { square: answer.value, worker_pid: answer.pid, caller_pid: process.pid };
}

const cfg = config();
const resonate = new Resonate(settings(cfg));
if (cfg.role === "worker") {
  resonate.register("square", square);
  await untilTerminated();
} else {
  resonate.register("relay", relay);
  emit(await resonate.run(cfg.id, "relay", cfg.x, cfg.worker_group));
}
await resonate.stop();
