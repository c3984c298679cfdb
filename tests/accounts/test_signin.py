import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from accounts.models import User
from accounts.roles import Role

PASSWORD = "a-long-test-password-1"

# Pages a signed-out visitor must reach: signing in, and recovering a password.
PUBLIC_URL_NAMES = {
    "account_login",
    "account_inactive",
    "account_signup",
    "account_reset_password",
    "account_reset_password_done",
    "account_reset_password_from_key_done",
    "account_confirm_email",
    "account_email_verification_sent",
    "account_login_code_confirm",
    "account_request_login_code",
    "account_confirm_login_code",
    "account_reauthenticate",
    "socialaccount_signup",
    "socialaccount_login_cancelled",
    "socialaccount_login_error",
    # Probes for load balancers and orchestrators (tests/config/test_health.py).
    "healthz",
    "readyz",
}
# Machine endpoints answer 401/403 instead of redirecting to a sign-in page.
MACHINE_PREFIXES = ("/api/", "/metrics")


def _concrete_paths(resolver=None, prefix=""):
    """Yield (name, path) for every URL pattern that takes no arguments."""
    resolver = resolver or get_resolver()
    for pattern in resolver.url_patterns:
        route = str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from _concrete_paths(pattern, prefix + route)
        elif isinstance(pattern, URLPattern) and "<" not in route and "(?P" not in route:
            path = "/" + (prefix + route).lstrip("^").rstrip("$").replace("\\Z", "")
            yield pattern.name, path.replace("^", "")


def test_demo_style_user_signs_in_with_email_and_password(client, make_user):
    make_user(email="ana@example.com")
    response = client.post(
        reverse("account_login"), {"login": "ana@example.com", "password": PASSWORD}
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("inbox:home")
    page = client.get(reverse("inbox:home"))
    assert page.status_code == 200
    assert "ana@example.com" in page.content.decode()


def test_wrong_password_does_not_sign_in(client, make_user):
    make_user(email="ana@example.com")
    response = client.post(
        reverse("account_login"), {"login": "ana@example.com", "password": "wrong-password-9"}
    )
    assert response.status_code == 200
    assert "not correct" in response.content.decode()
    assert client.get(reverse("inbox:home")).status_code == 302


def test_open_signup_is_off_by_default(client, db):
    response = client.post(
        reverse("account_signup"),
        {"email": "stranger@example.com", "password1": PASSWORD, "password2": PASSWORD},
    )
    assert "Sign Up Closed" in response.content.decode()
    assert not User.objects.filter(email="stranger@example.com").exists()


def test_open_signup_can_be_turned_on(client, db, settings):
    settings.INBOX_OPEN_SIGNUP = True
    client.post(
        reverse("account_signup"),
        {"email": "newcomer@example.com", "password1": PASSWORD, "password2": PASSWORD},
    )
    assert User.objects.filter(email="newcomer@example.com").exists()


def test_anonymous_visitors_are_sent_to_sign_in_from_every_page(client, db):
    """Walks every argument-free URL of the project; only sign-in pages are public.

    Pages redirect to a sign-in page; the API and the metrics answer 401/403 instead.
    """
    sign_in_pages = (reverse("account_login"), reverse("admin:login"))
    checked, wrong = 0, []
    for name, path in _concrete_paths():
        if name in PUBLIC_URL_NAMES or path in sign_in_pages:
            continue
        if path.startswith(MACHINE_PREFIXES):
            status = client.get(path).status_code
            if status not in (401, 403):
                wrong.append(f"{name} {path} -> {status}")
            checked += 1
            continue
        response = client.get(path, follow=True)
        final = response.redirect_chain[-1][0] if response.redirect_chain else "(no redirect)"
        if not final.startswith(sign_in_pages) or response.status_code != 200:
            wrong.append(f"{name} {path} -> {final} ({response.status_code})")
        checked += 1
    assert wrong == []
    assert checked >= 10


def test_sign_in_page_is_public(client, db):
    response = client.get(reverse("account_login"))
    assert response.status_code == 200
    assert 'name="password"' in response.content.decode()


@pytest.mark.parametrize("role", [Role.WORKER, Role.SUPERVISOR])
def test_reviewers_and_supervisors_cannot_reach_admin_pages(client, make_user, role):
    user = make_user(roles=(role,))
    client.force_login(user)
    for path in ["/admin/", "/admin/accounts/skill/", "/admin/accounts/user/",
                 "/admin/accounts/workerskill/add/"]:
        response = client.get(path)
        assert response.status_code == 302, path
        assert response["Location"].startswith(reverse("admin:login")), path
    assert "Admin" not in client.get(reverse("inbox:home")).content.decode()


def test_admins_reach_the_admin_pages_for_users_and_skills(client, make_user):
    admin = make_user(roles=(Role.ADMIN,))
    client.force_login(admin)
    for path in ["/admin/", "/admin/accounts/skill/", "/admin/accounts/user/",
                 "/admin/accounts/workerskill/", "/admin/accounts/workerskill/add/",
                 f"/admin/accounts/user/{admin.pk}/change/"]:
        assert client.get(path).status_code == 200, path


def test_sign_out_needs_a_post(client, make_user):
    client.force_login(make_user())
    client.get(reverse("account_logout"))
    assert client.get(reverse("inbox:home")).status_code == 200
    client.post(reverse("account_logout"))
    assert client.get(reverse("inbox:home")).status_code == 302


@pytest.mark.parametrize(("password", "why"), [
    ("Xy7!a", "too short"), ("password123", "too common"), ("48213756190", "entirely numeric"),
])
def test_a_short_common_or_numeric_password_is_refused(password, why):
    from django.contrib.auth.password_validation import validate_password
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError, match=why):
        validate_password(password)
