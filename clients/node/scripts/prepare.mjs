// npm's `prepare`: builds dist/ when this checkout is installed as a package —
// `npm install ./clients/node` from another project, an install from git, `npm ci`,
// `npm pack` — unless dist/ is newer than every source. A folder install does not install
// a linked package's devDependencies: when TypeScript is missing, the build's tools are
// installed first from package-lock.json (`npm ci --ignore-scripts`, in this directory).
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

function newest(path) {
  const s = statSync(path);
  if (!s.isDirectory()) return s.mtimeMs;
  let t = 0;
  for (const e of readdirSync(path)) t = Math.max(t, newest(join(path, e)));
  return t;
}

function built() {
  const outputs = ["dist/esm/index.js", "dist/cjs/index.js"].map((p) => join(root, p));
  if (!outputs.every((p) => existsSync(p))) return false;
  const out = Math.min(...outputs.map((p) => statSync(p).mtimeMs));
  const inputs = ["src", "package.json", "tsconfig.json", "tsconfig.cjs.json", "scripts/build.mjs"];
  return inputs.every((p) => newest(join(root, p)) <= out);
}

function run(cmd, args) {
  const r = spawnSync(cmd, args, { cwd: root, stdio: "inherit" });
  if (r.status !== 0) {
    console.error(`dlock-redis prepare: ${cmd} ${args.join(" ")} failed (${r.error?.message ?? `exit ${r.status}`})`);
    process.exit(1);
  }
}

if (!built()) {
  try {
    createRequire(join(root, "package.json")).resolve("typescript/bin/tsc");
  } catch {
    const npm = process.env.npm_execpath;
    const args = ["ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"];
    if (npm) run(process.execPath, [npm, ...args]);
    else run(process.platform === "win32" ? "npm.cmd" : "npm", args);
  }
  run(process.execPath, [join(root, "scripts", "build.mjs")]);
}
