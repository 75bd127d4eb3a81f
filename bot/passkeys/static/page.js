// The passkey pages' one script (bot/passkeys/html.py): base64url <-> bytes, and a credential as the
// JSON fido2 reads (no reliance on PublicKeyCredential.toJSON, which older phone browsers lack).
const dec = s => Uint8Array.from(atob(s.replace(/-/g, '+').replace(/_/g, '/')), c => c.charCodeAt(0));
const enc = b => btoa(String.fromCharCode(...new Uint8Array(b))).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
const said = (text, ok) => { const p = document.getElementById('said'); p.textContent = text; p.className = ok ? 'ok' : 'no'; };
const options = JSON.parse(document.getElementById('options').textContent);
const post = async (path, body) => {
  const r = await fetch(path, {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify(body)});
  try { return await r.json(); } catch (e) { return {ok: false, said: 'Signoff did not answer (' + r.status + '). Nothing was recorded.'}; }
};
const asJSON = c => {
  const r = c.response, out = {id: c.id, rawId: enc(c.rawId), type: c.type, response: {clientDataJSON: enc(r.clientDataJSON)}};
  if (r.attestationObject) out.response.attestationObject = enc(r.attestationObject);
  if (r.authenticatorData) out.response.authenticatorData = enc(r.authenticatorData);
  if (r.signature) out.response.signature = enc(r.signature);
  if (r.userHandle) out.response.userHandle = enc(r.userHandle);
  return out;
};
const ready = pk => {  // the options as WebAuthn takes them (bytes where JSON has base64url)
  pk.challenge = dec(pk.challenge);
  for (const c of pk.allowCredentials || pk.excludeCredentials || []) c.id = dec(c.id);
  if (pk.user) pk.user.id = dec(pk.user.id);
  return pk;
};
// A change to a person's passkeys is confirmed with one they have (options.confirm): null if the
// browser gave none (said on the page), {} when there is nothing to confirm with.
const confirmed = async () => {
  if (!options.confirm) return {};
  try {
    return {confirmation: asJSON(await navigator.credentials.get({publicKey: ready(options.confirm)}))};
  } catch (e) {
    said('Confirm with one of your passkeys first: your browser gave none (' + e.name + '). Nothing changed.', false);
    return null;
  }
};
const go = document.getElementById('go');
if (go) go.addEventListener('click', async () => {
  go.disabled = true;
  const pk = ready(options.publicKey);
  const confirmation = pk.user ? await confirmed() : {};
  if (confirmation === null) return;
  let credential;
  try {
    credential = pk.user ? await navigator.credentials.create({publicKey: pk}) : await navigator.credentials.get({publicKey: pk});
  } catch (e) {
    said('Your browser gave no passkey (' + e.name + '). Nothing was recorded: reload the page to try again.', false);
    return;
  }
  const label = document.getElementById('label');
  const answer = await post(location.pathname, {credential: asJSON(credential), label: label ? label.value : '', ...confirmation});
  said(answer.said, answer.ok);
});
for (const b of document.querySelectorAll('button[data-remove]')) b.addEventListener('click', async () => {
  const confirmation = await confirmed();
  if (confirmation === null) return;
  const answer = await post(location.pathname + '/remove', {credential_id: b.dataset.remove, ...confirmation});
  said(answer.said, answer.ok);
  if (answer.ok) b.closest('li').remove();
});
