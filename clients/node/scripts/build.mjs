// Builds dist/cjs (require) and dist/esm (import), each with its type declarations; npm pack
// runs it (prepack). In a clone with no node_modules it installs the devDependencies first.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';

const local = 'node_modules/typescript/bin/tsc';
if (!existsSync(local)) {
  process.stderr.write('pg-jobs build: no node_modules; npm ci installs the devDependencies first\n');
  execFileSync('npm', ['ci', '--no-audit', '--no-fund', '--ignore-scripts'], { stdio: 'inherit' });
}
rmSync('dist', { recursive: true, force: true });
const tsc = (project) => execFileSync(process.execPath, [local, '-p', project], { stdio: 'inherit' });
tsc('tsconfig.json');
tsc('tsconfig.esm.json');
for (const [dir, type] of [['dist/cjs', 'commonjs'], ['dist/esm', 'module']]) {
  mkdirSync(dir, { recursive: true });
  writeFileSync(`${dir}/package.json`, `${JSON.stringify({ type })}\n`);
}
