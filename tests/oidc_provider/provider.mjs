// A real OpenID Provider (panva's oidc-provider) for the console's OIDC login tests.
//
//   node provider.mjs --port-file FILE
//
// Listens on a free loopback port, writes the port to FILE once it serves. The clients are
// clients.json (the tests read it too); they are native apps, so any loopback port of the
// registered redirect URI is taken (RFC 8252, 7.3), whatever port a test gateway has.
// The provider's development pages take any login and password, then ask for consent (always
// asked of native clients; their Continue button grants it). A login of the form
// `name:group1,group2` signs in an account `name:group1,group2` whose `name` claim is
// `name` and whose `groups` claim is [group1, group2]; a plain `name` has no groups. The same
// groups are its `roles` claim, which only the userinfo endpoint gives (as issuers that keep
// such claims out of ID tokens do).
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import Provider from 'oidc-provider';

const portFile = process.argv[process.argv.indexOf('--port-file') + 1];
const clients = JSON.parse(readFileSync(new URL('./clients.json', import.meta.url), 'utf8'));

function account(id) {
  const [name, groups = ''] = id.split(':', 2);
  return {
    accountId: id,
    claims: async (use) => ({
      sub: id,
      name,
      preferred_username: name,
      email: `${name}@example.test`,
      groups: groups.split(',').filter(Boolean),
      ...(use === 'userinfo' ? { roles: groups.split(',').filter(Boolean) } : {}),
    }),
  };
}

const server = http.createServer();
server.listen(0, '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients,
    claims: {
      openid: ['sub'],
      profile: ['name', 'preferred_username'],
      email: ['email'],
      groups: ['groups', 'roles'],
    },
    scopes: ['openid', 'profile', 'email', 'groups'],
    conformIdTokenClaims: false, // the ID token carries the scopes' claims (groups), as the gateway reads them
    findAccount: (ctx, id) => account(id),
    cookies: { keys: [randomBytes(32).toString('hex')] },
    features: { devInteractions: { enabled: true } },
  });
  provider.on('server_error', (ctx, error) => console.error('server_error', error));
  server.on('request', provider.callback());
  writeFileSync(portFile, String(server.address().port));
  console.log(`oidc-provider ${issuer}`);
});

for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => server.close(() => process.exit(0)));
