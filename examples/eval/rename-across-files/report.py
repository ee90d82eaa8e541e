from users import get_usr


def line(user_id):
    name = get_usr(user_id) or "unknown"
    return f"user {user_id}: {name}"
