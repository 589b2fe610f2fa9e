// Validates KEDA ScaledObjects offline against @kubernetes-models/keda.
// Usage: node scaledobject.mjs LABEL < scaledobjects.json   (a JSON array of objects)
// Prints one "LABEL: ScaledObject NAME: problem" line per problem; exit 1 if any.
//
// The package's schema does not reject unknown fields, so this also walks its type
// declarations (.d.ts) to reject keys the schema does not define, and checks the
// redis-streams trigger's metadata against the keys KEDA documents for that scaler.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { ScaledObject } from "@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject";

const label = process.argv[2] ?? "input";
const objects = JSON.parse(readFileSync(0, "utf8"));
const pkgDir = dirname(createRequire(import.meta.url).resolve("@kubernetes-models/keda/package.json"));
const typesDir = join(pkgDir, "keda.sh", "v1alpha1");
const problems = [];

// Keys of an interface in a .d.ts file, with the declaration file of each key's model type.
const typeCache = new Map();
function typeKeys(file) {
  if (typeCache.has(file)) return typeCache.get(file);
  const text = readFileSync(join(typesDir, file), "utf8");
  const imports = new Map();
  for (const m of text.matchAll(/import \{ (\w+) \} from "\.\/([\w.]+)\.js"/g)) imports.set(m[1], m[2] + ".d.ts");
  const body = text.match(/export interface \w+ \{\n([\s\S]*?)\n\}/)[1];
  const keys = new Map();
  for (const m of body.matchAll(/^ {4}"([^"]+)"\??: (.*?);?$/gm)) {
    const ref = m[2].match(/^(?:Array<)?(I\w+)>?$/);
    keys.set(m[1], ref && imports.has(ref[1]) ? imports.get(ref[1]) : null);
  }
  typeCache.set(file, keys);
  return keys;
}

function strict(value, file, path, name) {
  if (value === null || typeof value !== "object") return;
  if (Array.isArray(value)) {
    value.forEach((v, i) => strict(v, file, `${path}[${i}]`, name));
    return;
  }
  const keys = typeKeys(file);
  for (const [k, v] of Object.entries(value)) {
    if (!keys.has(k)) problems.push(`${label}: ScaledObject ${name}: unknown field ${path}.${k}`);
    else if (keys.get(k)) strict(v, keys.get(k), `${path}.${k}`, name);
  }
}

// https://keda.sh/docs/latest/scalers/redis-streams/
const redisStreamsKeys = new Set([
  "address", "addressFromEnv", "host", "hostFromEnv", "port", "portFromEnv",
  "username", "usernameFromEnv", "password", "passwordFromEnv", "databaseIndex",
  "enableTLS", "unsafeSsl", "stream", "consumerGroup", "pendingEntriesCount",
  "streamLength", "lagCount", "activationLagCount",
]);

for (const obj of objects) {
  const name = obj?.metadata?.name ?? "(unnamed)";
  try {
    new ScaledObject(obj).validate();
  } catch (e) {
    problems.push(`${label}: ScaledObject ${name}: ${e.message}`);
    continue;
  }
  strict(obj.spec, "ScaledObjectSpec.d.ts", "spec", name);
  for (const k of Object.keys(obj)) {
    if (!["apiVersion", "kind", "metadata", "spec"].includes(k)) problems.push(`${label}: ScaledObject ${name}: unknown field ${k}`);
  }
  for (const [i, t] of obj.spec.triggers.entries()) {
    if (t.type !== "redis-streams") continue;
    const md = t.metadata ?? {};
    const where = `${label}: ScaledObject ${name}: spec.triggers[${i}].metadata`;
    for (const k of Object.keys(md)) if (!redisStreamsKeys.has(k)) problems.push(`${where}: unknown redis-streams key ${k}`);
    if (!md.stream) problems.push(`${where}: stream is required`);
    if (!(md.address || md.addressFromEnv || md.host || md.hostFromEnv)) problems.push(`${where}: needs address, addressFromEnv, host or hostFromEnv`);
    if (!md.consumerGroup) problems.push(`${where}: consumerGroup is required for lag scaling`);
    if (!/^[1-9][0-9]*$/.test(md.lagCount ?? "")) problems.push(`${where}: lagCount must be a positive integer string (got ${JSON.stringify(md.lagCount)})`);
    if (md.pendingEntriesCount || md.streamLength) problems.push(`${where}: set only lagCount (pendingEntriesCount/streamLength select another mode)`);
  }
}

for (const p of problems) console.log(p);
process.exit(problems.length ? 1 : 0);
