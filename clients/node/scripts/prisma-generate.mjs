// Generates the Prisma client test/adapters.test.mjs uses (test/prisma/schema.prisma), once.
// `prisma generate` needs none of Prisma's native engines (the client runs on @prisma/adapter-pg),
// but its CLI looks for the schema engine first and downloads it from outside the package
// registry when it finds none; PRISMA_SCHEMA_ENGINE_BINARY names one to skip that, never run.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';

if (!existsSync('node_modules/.prisma/client/index.js')) {
  execFileSync(process.execPath, ['node_modules/prisma/build/index.js', 'generate', '--schema', 'test/prisma/schema.prisma'], {
    stdio: ['ignore', 'ignore', 'inherit'],
    env: { ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: process.execPath, PRISMA_HIDE_UPDATE_MESSAGE: '1' },
  });
}
