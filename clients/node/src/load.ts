// The module `pg-jobs worker` runs: JavaScript as Node.js imports it, TypeScript through tsx
// when the application has it installed (or a loader it started Node.js with), else refused with
// the commands that run it.

import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const TYPESCRIPT = new Set(['.ts', '.mts', '.cts']);

/** tsx's loader (what `node --import tsx` imports), from the application's directory;
 * undefined where it has none. */
function tsxLoader(): string | undefined {
  try {
    return pathToFileURL(createRequire(path.join(process.cwd(), 'package.json')).resolve('tsx')).href;
  } catch {
    return undefined;
  }
}

function unknownExtension(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === 'ERR_UNKNOWN_FILE_EXTENSION';
}

/** Imports `file` (relative to the working directory) and answers its exports. */
export async function loadModule(file: string): Promise<Record<string, unknown>> {
  const url = pathToFileURL(path.resolve(file)).href;
  try {
    return await import(url) as Record<string, unknown>;
  } catch (err) {
    if (!TYPESCRIPT.has(path.extname(file)) || !unknownExtension(err)) throw err;
  }
  const loader = tsxLoader();
  if (loader === undefined) {
    throw new Error(`${file} is TypeScript, which Node.js does not run by itself: install tsx in the `
      + 'application (npm install --save-dev tsx) and pg-jobs worker loads it, or start it as '
      + `\`node --import tsx node_modules/.bin/pg-jobs worker ${file}\`, or compile it (npx tsc) and `
      + 'pass the .js file');
  }
  await import(loader); // registers its hooks, as --import does
  // (a new URL: the loader keeps the failed import of the first)
  return await import(`${url}?tsx`) as Record<string, unknown>;
}
