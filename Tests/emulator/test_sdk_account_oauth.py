"""Conformance of users/*, auth/token/revoke and the OAuth2 flows, through the SDK."""

import datetime
import re
import time
from urllib.parse import parse_qs, urlsplit

import dropbox
import pytest
import requests
from dropbox.exceptions import AuthError

from emulator_suite import APP_KEY, CERT


def approve(url, **extra):
    """Opens the authorize page with approve=1, as a user clicking "Allow" would."""
    resp = requests.get(url + "&approve=1", verify=CERT, allow_redirects=False)
    return resp


def code_from_page(html):
    return re.search(r'<code id="auth-code">([^<]+)</code>', html).group(1)


def pkce_tokens(emu):
    flow = dropbox.DropboxOAuth2FlowNoRedirect(APP_KEY, use_pkce=True, token_access_type="offline")
    url = flow.start()
    assert "code_challenge=" in url and "code_challenge_method=S256" in url
    page = approve(url)
    assert page.status_code == 200
    return flow.finish(code_from_page(page.text))


def test_get_current_account(dbx):
    acct = dbx.users_get_current_account()
    assert acct.account_id.startswith("dbid:") and len(acct.account_id) == 40
    assert acct.root_info.root_namespace_id and acct.name.display_name
    assert acct.account_type.is_pro()


def test_get_space_usage_tracks_uploads(dbx, base):
    before = dbx.users_get_space_usage()
    dbx.files_upload(b"x" * 1000, base + "/space.bin")
    after = dbx.users_get_space_usage()
    assert after.used - before.used == 1000
    assert after.allocation.is_individual() and after.allocation.get_individual().allocated > after.used


def test_authorize_page_without_approve_shows_allow_link(emu):
    resp = requests.get(emu.url + "/oauth2/authorize?response_type=code&client_id=" + APP_KEY, verify=CERT)
    assert resp.status_code == 200 and 'id="approve"' in resp.text and "approve=1" in resp.text


def test_authorize_rejects_unknown_client(emu):
    resp = requests.get(emu.url + "/oauth2/authorize?response_type=code&client_id=other&approve=1", verify=CERT)
    assert resp.status_code == 400


def test_pkce_no_redirect_flow_refresh_after_expiry_then_revoke(emu):
    emu.config(token_ttl=1)
    result = pkce_tokens(emu)
    assert result.access_token.startswith("sl.") and result.refresh_token and result.account_id
    # Claim a far expiry so the SDK does not refresh early: it must hit 401 expired_access_token.
    client = dropbox.Dropbox(oauth2_access_token=result.access_token, oauth2_refresh_token=result.refresh_token,
                             oauth2_access_token_expiration=datetime.datetime.utcnow() + datetime.timedelta(hours=1),
                             app_key=APP_KEY, ca_certs=CERT, max_retries_on_error=0)
    assert client.users_get_current_account().account_id == result.account_id
    time.sleep(1.2)
    emu.reset_stats()
    client.users_get_current_account()  # expired -> SDK refreshes -> retried call succeeds
    stats = emu.stats()
    assert stats["faults"]["expired"] == 1 and stats["requests"]["oauth2/token"] == 1
    assert client._oauth2_access_token != result.access_token
    emu.config(token_ttl=0)
    client.auth_token_revoke()
    with pytest.raises(AuthError) as exc:
        dropbox.Dropbox(client._oauth2_access_token, ca_certs=CERT).users_get_current_account()
    assert exc.value.error.is_invalid_access_token()
    # The refresh token died with it.
    resp = requests.post(emu.url + "/oauth2/token", verify=CERT, data={
        "grant_type": "refresh_token", "refresh_token": result.refresh_token, "client_id": APP_KEY})
    assert resp.status_code == 400 and resp.json()["error"] == "invalid_grant"


def test_expired_token_without_refresh_is_401(emu):
    emu.config(token_ttl=1)
    result = pkce_tokens(emu)
    time.sleep(1.2)
    with pytest.raises(AuthError) as exc:
        dropbox.Dropbox(result.access_token, ca_certs=CERT).users_get_current_account()
    assert exc.value.error.is_expired_access_token()


def test_code_is_single_use_and_verifier_checked(emu):
    flow = dropbox.DropboxOAuth2FlowNoRedirect(APP_KEY, use_pkce=True, token_access_type="offline")
    code = code_from_page(approve(flow.start()).text)
    bad = requests.post(emu.url + "/oauth2/token", verify=CERT, data={
        "grant_type": "authorization_code", "code": code, "client_id": APP_KEY, "code_verifier": "wrong" * 10})
    assert bad.status_code == 400 and bad.json()["error"] == "invalid_grant"
    flow.finish(code)
    with pytest.raises(requests.HTTPError):
        flow.finish(code)


def test_redirect_flow_with_state(emu):
    session = {}
    flow = dropbox.DropboxOAuth2Flow(APP_KEY, redirect_uri="http://localhost:9/cb", session=session,
                                     csrf_token_session_key="csrf", use_pkce=True, token_access_type="offline")
    resp = approve(flow.start())
    assert resp.status_code == 302
    location = resp.headers["Location"]
    assert location.startswith("http://localhost:9/cb?")
    query = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
    assert query["state"].startswith(session["csrf"])
    result = flow.finish(query)
    assert result.access_token and result.refresh_token


def test_online_access_has_no_refresh_token(emu):
    flow = dropbox.DropboxOAuth2FlowNoRedirect(APP_KEY, use_pkce=True, token_access_type="online")
    result = flow.finish(code_from_page(approve(flow.start()).text))
    assert result.access_token and not result.refresh_token


def test_revoke_static_style_token(emu):
    result = pkce_tokens(emu)
    client = dropbox.Dropbox(result.access_token, ca_certs=CERT)
    client.auth_token_revoke()
    with pytest.raises(AuthError) as exc:
        client.users_get_current_account()
    assert exc.value.error.is_invalid_access_token()


def test_unknown_token_is_invalid(emu):
    with pytest.raises(AuthError) as exc:
        dropbox.Dropbox("no-such-token", ca_certs=CERT).users_get_space_usage()
    assert exc.value.error.is_invalid_access_token()


def test_plain_pkce_and_basic_auth_code_grant(emu):
    base = emu.url + "/oauth2/authorize?response_type=code&client_id=" + APP_KEY
    code = code_from_page(approve(base + "&code_challenge=plainverifier123&code_challenge_method=plain").text)
    resp = requests.post(emu.url + "/oauth2/token", verify=CERT, data={
        "grant_type": "authorization_code", "code": code, "client_id": APP_KEY, "code_verifier": "plainverifier123"})
    assert resp.status_code == 200 and resp.headers["Content-Type"] == "application/json"
    assert "refresh_token" not in resp.json() and resp.json()["expires_in"] == 14400
    # Without PKCE the app authenticates with its secret, here through HTTP Basic (as golang/oauth2 does).
    code = code_from_page(approve(base + "&token_access_type=offline").text)
    resp = requests.post(emu.url + "/oauth2/token", verify=CERT, auth=(APP_KEY, "any-secret"),
                         data={"grant_type": "authorization_code", "code": code})
    body = resp.json()
    assert resp.status_code == 200 and body["refresh_token"] and body["uid"] and body["account_id"].startswith("dbid:")
    refreshed = requests.post(emu.url + "/oauth2/token", verify=CERT, auth=(APP_KEY, "any-secret"),
                              data={"grant_type": "refresh_token", "refresh_token": body["refresh_token"]})
    assert refreshed.status_code == 200 and refreshed.json()["access_token"] != body["access_token"]
    assert dropbox.Dropbox(refreshed.json()["access_token"], ca_certs=CERT).users_get_space_usage().used >= 0


def test_token_endpoint_errors(emu):
    resp = requests.post(emu.url + "/oauth2/token", verify=CERT, data={"grant_type": "password", "client_id": APP_KEY})
    assert resp.status_code == 400 and resp.json()["error"] == "unsupported_grant_type"
    resp = requests.post(emu.url + "/oauth2/token", verify=CERT,
                         data={"grant_type": "refresh_token", "refresh_token": "nope", "client_id": APP_KEY})
    assert resp.status_code == 400 and resp.json()["error"] == "invalid_grant"
    resp = requests.post(emu.url + "/oauth2/token", verify=CERT,
                         data={"grant_type": "refresh_token", "refresh_token": "nope", "client_id": "intruder"})
    assert resp.status_code == 400 and resp.json()["error"] == "invalid_client"
