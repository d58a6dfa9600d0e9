"""users/get_current_account, users/get_space_usage and auth/token/revoke."""


def get_current_account(call):
    store = call.app.store
    return {
        "account_id": store.account_id,
        "name": {"given_name": "Emulated", "surname": "User", "familiar_name": "Emulated",
                 "display_name": "Emulated User", "abbreviated_name": "EU"},
        "email": "emulated.user@example.com",
        "email_verified": True,
        "disabled": False,
        "locale": "en",
        "referral_link": "https://db.tt/emulator",
        "is_paired": False,
        "account_type": {".tag": "pro"},
        "root_info": {".tag": "user", "root_namespace_id": store.namespace_id,
                      "home_namespace_id": store.namespace_id},
        "country": "US",
    }


def get_space_usage(call):
    with call.app.store.lock:
        used = call.app.store.used_bytes
    return {"used": used, "allocation": {".tag": "individual", "allocated": call.app.quota()}}


def revoke(call):
    call.app.tokens.revoke(call.token)
    return None


ROUTES = {
    "users/get_current_account": ("rpc", True, False, get_current_account),
    "users/get_space_usage": ("rpc", True, False, get_space_usage),
    "auth/token/revoke": ("rpc", True, False, revoke),
}
