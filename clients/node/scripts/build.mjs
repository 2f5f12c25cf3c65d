// Builds dist/cjs (require) and dist/esm (import), each with its type declarations.
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';

rmSync('dist', { recursive: true, force: true });
const tsc = (project) => execFileSync(process.execPath, ['node_modules/typescript/bin/tsc', '-p', project], { stdio: 'inherit' });
tsc('tsconfig.json');
tsc('tsconfig.esm.json');
for (const [dir, type] of [['dist/cjs', 'commonjs'], ['dist/esm', 'module']]) {
  mkdirSync(dir, { recursive: true });
  writeFileSync(`${dir}/package.json`, `${JSON.stringify({ type })}\n`);
}
