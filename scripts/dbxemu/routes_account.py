"""users/get_current_account, users/get_space_usage and auth/token/revoke.

A `--team-space` account answers as a Business team member (namespaces.py has the sources):
account_type business, a `team` root_info, and a team allocation in the space usage."""


def get_current_account(call):
    store = call.app.store
    account = call.app.account
    answer = {**personal_account(store), "account_type": {".tag": account.account_type},
              "email_verified": account["email_verified"]}
    if account.team_space:
        answer.update(root_info=account.root_info(), team=TEAM, team_member_id="dbmid:AA" + store.account_id[7:])
    return answer


# users.stone FullTeam, with team_policies.stone's example values.
TEAM = {"id": "dbtid:AAFdgehTzw7WlXhZJsbGCLePe8RvQGYDr-I", "name": "Emulated Team",
        "sharing_policies": {"shared_folder_member_policy": {".tag": "team"},
                             "shared_folder_join_policy": {".tag": "from_anyone"},
                             "shared_link_create_policy": {".tag": "team_only"},
                             "group_creation_policy": {".tag": "admins_only"},
                             "shared_folder_link_restriction_policy": {".tag": "anyone"},
                             "enforce_link_password_policy": {".tag": "optional"},
                             "default_link_expiration_days_policy": {".tag": "none"},
                             "shared_link_default_permissions_policy": {".tag": "default"}},
        "office_addin_policy": {".tag": "disabled"}, "top_level_content_policy": {".tag": "admin_only"}}


def personal_account(store):
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
    return call.app.account.space_usage(call.app.allocated())


def revoke(call):
    call.app.tokens.revoke(call.token)
    return None


ROUTES = {
    "users/get_current_account": ("rpc", True, False, get_current_account),
    "users/get_space_usage": ("rpc", True, False, get_space_usage),
    "auth/token/revoke": ("rpc", True, False, revoke),
}
