// Validates Docker Compose files offline against the Compose Specification's JSON schema
// (compose-spec.json, as bundled by npm dclint in schemas/compose.schema.json; pinned by
// package-lock.json), the way `docker compose` reads them: YAML 1.2 with `<<` merge keys
// resolved (npm yaml), then the schema (ajv, draft-07, unknown fields rejected by the
// schema's own additionalProperties: false).
// Usage: node compose.mjs FILE...   Prints one "FILE: problem" line per problem; exit 1 if any.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { Ajv } from "ajv";
import { parseDocument } from "yaml";

const require = createRequire(import.meta.url);
const schemaFile = join(dirname(require.resolve("dclint/package.json")), "schemas", "compose.schema.json");
const schema = JSON.parse(readFileSync(schemaFile, "utf8"));
// ajv knows draft-07 by its canonical id; the spec writes it with https and no "#".
delete schema.$schema;
const ajv = new Ajv({ allErrors: true, strict: false, allowUnionTypes: true });
const validate = ajv.compile(schema);

const problems = [];
for (const file of process.argv.slice(2)) {
  let doc;
  try {
    doc = parseDocument(readFileSync(file, "utf8"), { merge: true, prettyErrors: true });
  } catch (e) {
    problems.push(`${file}: ${e.message}`);
    continue;
  }
  if (doc.errors.length) {
    for (const e of doc.errors) problems.push(`${file}: YAML: ${e.message.split("\n")[0]}`);
    continue;
  }
  const data = doc.toJS({ maxAliasCount: 100 });
  if (!validate(data)) {
    for (const e of validate.errors) {
      const extra = e.params?.additionalProperty ? ` (${e.params.additionalProperty})` : "";
      problems.push(`${file}: compose schema: ${e.instancePath || "/"} ${e.message}${extra}`);
    }
  }
}
for (const p of problems) console.log(p);
process.exit(problems.length ? 1 : 0);
