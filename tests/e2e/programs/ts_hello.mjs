// Scenario 1: a workflow with two ctx.run steps (generator API).
import { Resonate } from "@resonatehq/sdk";
import { config, emit, record, settings } from "./tsshared.mjs";

const cfg = config();

function greet(ctx, name) {
  record(cfg.ledger, `greet ${name}`);
  return `hello ${name}`;
}

async function shout(ctx, text) {
  return `${text.toUpperCase()}!`;
}

function* hello(ctx, name) {
  const greeting = yield* ctx.run(greet, name);
  return yield* ctx.run(shout, greeting);
}

const resonate = new Resonate(settings(cfg));
resonate.register("hello", hello);
emit(await resonate.run(cfg.id, "hello", cfg.name));
await resonate.stop();
